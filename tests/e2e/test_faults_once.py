"""The fault matrix, exactly once (issue 20): a commit runs once and is never misreported, on a real sandbox
host. Cuts are real (the sshd processes serving the run SIGKILLed from a one-shot shim at the exact step, as
in test_faults.py); the late start is a `bash` shim that receives the whole commit script, cuts the
connection, and starts it seconds later; the killed commit shell is SIGKILLed on the host with the connection
alive; the slow stop is a real `ExecStop=` that outlasts the lock timeout."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator

import pytest

from remediate.host.common.probe import probe_script
from remediate.transport import channels, ssh
from remediate.transport.base import SSHOptions
from remediate.transport.ssh import SSHTransport
from tests.support.faults import CUT as _CUT
from tests.support.faults import FIRED, changing, install_shim, promise
from tests.support.node import UNIT, UNIT_PATH, Node, poll

pytestmark = pytest.mark.e2e

LATE_DONE = "/run/fault.late.done"
LATE_OUT = "/run/fault.late.out"
DROPIN = f"/etc/systemd/system/{UNIT}.d/50-slow-stop.conf"


@pytest.fixture
def host(incident: Node) -> Iterator[Node]:
    node = incident
    node.host.run("/bin/rm", "-rf", "--", FIRED, LATE_DONE, LATE_OUT)
    yield node
    for tool in ("bash", "systemctl"):
        path = node.host.path(f"/usr/local/sbin/{tool}")
        if path.exists():
            path.unlink()
    node.host.run("/bin/rm", "-rf", "--", FIRED, LATE_DONE, LATE_OUT, DROPIN)
    node.host.systemctl("daemon-reload")


def test_late_start_commit_after_a_cut_runs_once(host: Node) -> None:
    """The commit script reaches the host whole, the connection is cut before it starts, and it starts 4 s
    later, after the run reconnected, found no trace of its token and sent it again. Exactly one
    daemon-reload + restart: the late script finds its token claimed (@@duplicate). (Before: a new token per
    send, so the late script ran the commit a second time, a restart the run never saw.)"""
    node = host
    original = node.bytes(UNIT_PATH)
    shim = (
        "#!/bin/bash\n"
        f'if [ "$*" = "-s" ] && mkdir {FIRED} 2>/dev/null; then\n'
        "  script=$(cat; echo x); script=${script%x}\n"
        f"{_CUT}\n"
        f"  ( sleep 4; printf '%s' \"$script\" | /bin/bash -s >{LATE_OUT} 2>&1; : >{LATE_DONE} ) "
        "</dev/null >/dev/null 2>&1 &\n"
        "  exit 0\n"
        "fi\n"
        'exec /bin/bash "$@"\n'
    )
    node.host.write("/usr/local/sbin/bash", shim, mode=0o755)

    run = node.cli("oom", "--wait-timeout", "60")
    poll(lambda: node.host.path(LATE_DONE).exists(), deadline=60, what="the late commit script to end")

    assert node.host.path(FIRED).exists(), "the cut never happened"
    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert node.host.read(LATE_OUT).startswith("@@duplicate"), node.host.read(LATE_OUT)
    promise(node, original, changed=True)
    assert len(node.backups(UNIT_PATH)) == 1
    assert changing(node).count("daemon-reload") == 1, changing(node)
    assert changing(node).count(f"restart {UNIT}") == 1, changing(node)
    assert node.healthy() and node.server_info()["max_total_num_tokens"] == 195011


# SIGKILL the commit's shells, from the shim at its step up to (and including) the one sshd started, that one
# first (else it reports its subshell's death before it dies); the connection stays up. The shim itself goes on
# and runs the step.
_KILL_COMMIT_SHELL = r"""
pids=""
pid=$PPID
while [ "$pid" -gt 1 ]; do
  next=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status")
  pids="$pid $pids"
  case "$(cat "/proc/$next/comm")" in sshd*) break ;; esac
  pid=$next
done
kill -9 $pids
"""


def test_commit_shell_killed_without_a_cut_is_read_back_and_rolled_back(host: Node) -> None:
    """The commit's bash SIGKILLed on the host (the OOM killer, an admin) after the write, the connection
    alive: no exit status, no output. The run reads the token's log and the files back — the unit holds the
    new bytes — and takes the rollback path. (Before: "exit status -1; nothing was written", no undo.)"""
    node = host
    original = node.bytes(UNIT_PATH)
    install_shim(node, "systemctl", "daemon-reload", _KILL_COMMIT_SHELL)

    run = node.cli("oom", "--wait-timeout", "30")

    assert node.host.path(FIRED).exists(), "the kill never happened"
    assert run.returncode == 1, run
    result = run.result
    error = result["error"]
    assert result["outcome"] == "rolled_back", run
    assert "killed on the host" in error and "nothing was written" not in error, error
    assert f"{UNIT_PATH} has the new bytes" in error, error
    promise(node, original, changed=False)
    (backup,) = node.backups(UNIT_PATH)
    assert node.bytes(backup) == original
    assert changing(node).count(f"restart {UNIT}") == 1, "only the undo's restart: the killed commit never got there"
    assert node.healthy() and node.server_info()["max_total_num_tokens"] == 209007


def test_reconnect_behind_a_slow_stop_waits_for_its_own_commit(host: Node) -> None:
    """The stop takes 4 s (a real ExecStop=, like a hung NCCL teardown), longer than --lock-timeout 1, and the
    connection is cut as the restart begins. Taking the lock back waits for our own commit script first (its
    own limit), then the unit's lock: the run finishes, exit 0. (Before: flock -w 1 behind our own commit,
    exit 75, "state unknown … (hold)", no wait, no rollback.)"""
    node = host
    original = node.bytes(UNIT_PATH)
    node.host.write(DROPIN, "[Service]\nExecStop=/bin/sleep 4\nTimeoutStopSec=30\n", mode=0o644)
    node.host.systemctl("daemon-reload", check=True)
    install_shim(node, "systemctl", "restart*", _CUT)

    run = node.cli("oom", "--wait-timeout", "60", "--lock-timeout", "1")

    assert node.host.path(FIRED).exists(), "the cut never happened"
    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert "(hold)" not in run.stdout + run.stderr
    promise(node, original, changed=True)
    assert changing(node).count(f"restart {UNIT}") == 1
    assert node.server_info()["max_total_num_tokens"] == 195011


# -- the lock holder on a half-open connection ---------------------------------------------------------

LOCK = f"/run/remediate/{UNIT}.lock"


def _held(node: Node) -> bool:
    return node.host.run("/usr/bin/flock", "-n", LOCK, "true").returncode != 0


def _holder(node: Node) -> tuple[SSHTransport, str]:
    script = probe_script(
        UNIT, (), journal_lines=0, journal_since=None, lock_dir="/run/remediate", lock_wait=5, heartbeat_timeout=2
    )
    return SSHTransport(node.host.name, SSHOptions(ssh_config=str(node.fleet.ssh_config))), "bash -c " + shlex.quote(
        script
    )


def test_the_heartbeat_keeps_the_lock_while_the_run_lives(host: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    node = host
    monkeypatch.setattr(ssh, "HEARTBEAT_S", 0.5)
    transport, command = _holder(node)
    try:
        with transport.hold(command, ready="@@end", timeout=30):
            end = time.monotonic() + 5  # more than twice the holder's heartbeat timeout
            while time.monotonic() < end:
                assert _held(node), "the holder let the lock go while heartbeats came"
        poll(lambda: not _held(node), deadline=20, what="the lock to be released once the hold ends")
    finally:
        transport.close()


def test_a_silent_channel_releases_the_lock_within_the_heartbeat_timeout(
    host: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A half-open connection: the channel stays open and nothing comes (no heartbeat). The holder gives the
    lock up after its heartbeat timeout. (Before: it held the lock until the channel closed: hours.)"""
    node = host
    monkeypatch.setattr(channels.Heartbeat, "start", lambda self: None)
    transport, command = _holder(node)
    try:
        with transport.hold(command, ready="@@end", timeout=30):
            assert _held(node)
            poll(lambda: not _held(node), deadline=30, what="the silent holder to let the lock go")
    finally:
        transport.close()
