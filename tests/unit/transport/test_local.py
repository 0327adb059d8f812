"""The local transport (`--local`): real bash processes and a real HTTP server on loopback."""

from __future__ import annotations

import http.server
import os
import pwd
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.errors import AuthError, CommandError, ConnectError, ConnectionLost, TransportError
from remediate.transport import base, local
from remediate.transport.base import Retake
from remediate.transport.local import LocalTransport


@pytest.fixture
def transport() -> Iterator[LocalTransport]:
    t = LocalTransport("here", require_root=False)
    yield t
    t.close()


def test_run_returns_the_result_and_never_raises_on_a_non_zero_exit(transport: LocalTransport) -> None:
    result = transport.run("echo out; echo err >&2; exit 3")
    assert (result.exited, result.stdout, result.stderr) == (3, "out\n", "err\n")


def test_run_feeds_stdin_to_bash_s(transport: LocalTransport) -> None:
    assert transport.run("bash -s", stdin='echo "$((6 * 7))"\n').stdout == "42\n"


def test_run_past_its_timeout_is_connection_lost_and_kills_the_whole_group(
    transport: LocalTransport, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    with pytest.raises(ConnectionLost, match="timed out after 1s"):
        transport.run(f"sleep 60 & echo $! > {pidfile}; wait", timeout=1)
    child = int(pidfile.read_text())
    # the group was killed: the child is gone (a zombie at most, until its reaper, PID 1, collects it). The
    # SIGKILL is pending until the child next runs, which on a loaded machine is a moment later: polled, bounded.
    state = Path(f"/proc/{child}/stat")

    def dead() -> bool:
        try:
            return state.read_text().split(") ")[1].startswith(("Z", "X"))
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 10
    while not dead() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dead(), state.read_text()


def test_output_past_the_cap_is_a_transport_error(transport: LocalTransport, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "MAX_OUTPUT_BYTES", 1000)
    with pytest.raises(TransportError, match="more than 1000 bytes") as caught:
        transport.run("yes")
    assert not isinstance(caught.value, ConnectionLost)
    assert local.MAX_OUTPUT_BYTES <= base.MAX_OUTPUT_BYTES


def test_a_non_root_user_is_refused_with_one_clear_line() -> None:
    if os.geteuid() == 0:
        probe = subprocess.run(  # the check itself, as a user that is not root
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
             "from remediate.transport.local import LocalTransport; LocalTransport('h').run('true')"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert probe.returncode != 0
        assert "--local must run as root" in probe.stderr
    else:
        with pytest.raises(AuthError, match="--local must run as root"):
            LocalTransport("h").run("true")


def test_hold_keeps_the_process_until_the_context_ends(transport: LocalTransport, tmp_path: Path) -> None:
    flag = tmp_path / "held"
    command = f"echo taken; echo @@ready; touch {flag}; while read -r _; do :; done; rm {flag}"
    with transport.hold(command, ready="@@ready", timeout=10) as output:
        assert output == "taken\n@@ready\n"
        assert transport.run(f"for _ in $(seq 100); do [ -e {flag} ] && break; sleep 0.05; done; ls {flag}").ok
    assert not flag.exists()  # stdin closed: the holder let go and cleaned up before the context returned


def test_a_hold_that_exits_first_is_a_command_error(transport: LocalTransport) -> None:
    with pytest.raises(CommandError) as caught, transport.hold("echo busy; exit 4", ready="@@ready", timeout=10):
        pass
    assert (caught.value.result.exited, caught.value.result.stdout) == (4, "busy\n")


def test_a_hold_without_its_ready_line_in_time_is_a_connect_error(transport: LocalTransport) -> None:
    with pytest.raises(ConnectError, match="no '@@ready'"), transport.hold("sleep 30", ready="@@ready", timeout=1):
        pass


def test_reconnect_keeps_a_running_hold_and_takes_back_a_dead_one(transport: LocalTransport, tmp_path: Path) -> None:
    count = tmp_path / "starts"
    command = f"echo x >> {count}; echo @@ready; while read -r _; do :; done"
    with transport.hold(command, ready="@@ready", timeout=10):
        transport.reconnect(5)
        assert count.read_text() == "x\n"  # still running: not started again
    retake = Retake(command=f"echo again >> {count}; echo @@locked; echo @@ready; cat", expect="@@locked", timeout=5)
    with transport.hold("echo @@ready; read -r _", ready="@@ready", timeout=10, again=lambda _: retake) as first:
        transport._holds[0].chan.sendall(b"\n")  # the holder ends (its process is gone, as after a lost link)
        transport._holds[0].chan.proc.wait(10)
        transport.reconnect(5)
        assert count.read_text() == "x\nagain\n"
        assert first == "@@ready\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"max_total_num_tokens": 1000}' if self.path == "/server_info" else b"x" * 100
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in (data, b"-done"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_http_get_and_post_reach_the_server_directly(transport: LocalTransport, server: int) -> None:
    got = transport.http_get("127.0.0.1", server, "/server_info")
    assert (got.status, got.body) == (200, b'{"max_total_num_tokens": 1000}')
    posted = transport.http_post("127.0.0.1", server, "/generate", b'{"a": 1}')
    assert (posted.status, posted.body) == (200, b'{"a": 1}-done')
    with transport.http_stream("127.0.0.1", server, "/generate", b"abc") as stream:
        assert b"".join(data for _, data in stream.pieces()) == b"abc-done"


def test_a_body_past_the_document_cap_is_a_failed_poll(
    transport: LocalTransport, server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "MAX_DOCUMENT_BYTES", 10)
    with transport.http_stream("127.0.0.1", server, "/big", None, method="GET", max_body=10) as stream:
        response = stream.response()
    assert response.status is None and "larger than 10 bytes" in str(response.error)


def test_a_refused_port_is_status_none(transport: LocalTransport) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        got = transport.http_get("127.0.0.1", port, "/health", timeout=2)
    assert got.status is None and got.error


def test_a_silent_server_is_cut_at_the_total_timeout(transport: LocalTransport) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        got = transport.http_get("127.0.0.1", listener.getsockname()[1], "/health", timeout=1)
    assert got.status is None and "within 1s" in str(got.error)


def test_the_local_transport_imports_no_ssh_library() -> None:
    code = "import sys, remediate.transport.local; assert 'paramiko' not in sys.modules and 'fabric' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_root_shells_never_see_the_callers_bash_env_functions_or_path(
    transport: LocalTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile caller's environment (issue 31): BASH_ENV, an exported function shadowing systemctl, and a
    PATH whose first directory holds a `systemctl` and a `flock` of its own. Each would write the marker;
    the shells run with sshd's fixed login environment instead, so none of them runs."""
    marker = tmp_path / "reached"
    evil = tmp_path / "evil-bin"
    evil.mkdir()
    for tool in ("systemctl", "flock", "bash"):
        (evil / tool).write_text(f"#!/bin/sh\necho {tool} >> {marker}\n")
        (evil / tool).chmod(0o755)
    sourced = tmp_path / "bash_env"
    sourced.write_text(f"echo BASH_ENV >> {marker}\n")
    monkeypatch.setenv("BASH_ENV", str(sourced))
    monkeypatch.setenv("ENV", str(sourced))
    monkeypatch.setenv("BASH_FUNC_systemctl%%", f"() {{ echo function >> {marker}; }}")
    monkeypatch.setenv("PATH", f"{evil}:{os.environ['PATH']}")
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/evil.so")
    # the caller's own shell would be reached (the test is able to fail): bash from its PATH sources BASH_ENV
    subprocess.run(["bash", "-c", "systemctl --version"], check=False, capture_output=True)  # noqa: S607
    assert marker.exists()
    marker.unlink()

    result = transport.run("systemctl --version >/dev/null 2>&1; flock -V >/dev/null 2>&1; bash -c true; env")
    with transport.hold("systemctl --version >/dev/null 2>&1; echo @@ready; read -r _", ready="@@ready", timeout=10):
        pass
    assert not marker.exists(), marker.read_text()
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env["PATH"] == local.LOGIN_PATH and env["LC_ALL"] == "C"
    me = pwd.getpwuid(os.geteuid())
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == (me.pw_dir, me.pw_name, me.pw_name)
    assert not {k for k in env if k.startswith(("BASH_FUNC", "BASH_ENV", "LD_PRELOAD")) or k == "ENV"}


def test_bash_is_run_by_absolute_path() -> None:
    assert local.BASH == "/bin/bash" and os.access(local.BASH, os.X_OK)
