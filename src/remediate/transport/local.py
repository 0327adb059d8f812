"""Local transport: the host is this machine (`remediate … --local`, the Ansible collection's modules).

The same :class:`~remediate.transport.base.Transport` as ssh.py, so the runner, the transaction, the lock and
the rollback run unchanged on the GPU host itself: commands run through ``bash -c`` (subprocess, a new process
group each, killed at the timeout), holds are processes kept while their context is open, and HTTP goes to
the server over a TCP socket with transport/http1.py's exchange (the bounds of ssh.py's direct-tcpip channels).

No sudo here: writing units, ``systemctl daemon-reload`` and restarts need root, so :meth:`LocalTransport.open`
refuses a non-root user (AuthError, exit 3) rather than failing half-way through a transaction; run it as root
(``sudo remediate oom --local``, Ansible's ``become: true``). A user's own units (``systemctl --user``) are not
what sglang servers run as on GPU hosts, and are not supported.

Root's shells never see the caller's environment: each runs ``/bin/bash`` (never found on ``$PATH``) with
the clean, fixed environment sshd gives a login (:func:`login_environment`): a known ``PATH``, ``LC_ALL=C``,
the user's ``HOME``/``USER``/``LOGNAME``, and nothing else — no ``BASH_ENV`` (sourced by every
non-interactive bash), no exported ``BASH_FUNC_*%%`` functions (which would shadow ``systemctl`` or
``flock``), no caller's ``PATH`` with a hostile first directory.

Nothing here is ever lost: a local command has no connection to die. ``reconnect`` only takes back a hold
whose process ended meanwhile (with its :class:`~remediate.transport.base.Retake`, as ssh.py does); holds
still running are kept as they are.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING

from remediate.errors import AuthError, CommandError, ConnectError, ConnectionLost, TransportError
from remediate.models import CommandResult
from remediate.transport.base import MAX_FOLLOW_LINE_BYTES, MAX_FOLLOW_LINES, MAX_OUTPUT_BYTES, Followed, HttpResponse
from remediate.transport.channels import Heartbeat, Hold, Holds, Lines
from remediate.transport.http1 import MAX_DOCUMENT_BYTES, MAX_STREAM_BYTES, HttpStream, exchange, request_bytes

if TYPE_CHECKING:
    from remediate.transport.preconnect import Preconnect

HEARTBEAT_S = 5.0  # as ssh.py's: a line to every hold's stdin this often (templates/probe.sh.j2)
COMMAND_TIMEOUT_S = 600.0  # a command given no timeout of its own: nothing waits forever
_STOP_GRACE_S = 2.0  # a hold's process, its stdin closed, is killed when still running after this
BASH = "/bin/bash"  # by absolute path: a caller's PATH never chooses root's shell
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # sshd's default for root (_PATH_STDPATH)


def login_environment() -> dict[str, str]:
    """The environment of every command run here, whatever the caller's (``env -i`` semantics): what sshd's
    do_setup_env() (session.c) gives a login — PATH, HOME, USER, LOGNAME, SHELL — plus ``LC_ALL=C``."""
    uid = os.geteuid()
    try:
        entry = pwd.getpwuid(uid)
        home, user = entry.pw_dir, entry.pw_name
    except KeyError:  # a uid without a passwd entry (a container's): still a fixed, known environment
        home, user = "/", str(uid)
    return {"PATH": LOGIN_PATH, "HOME": home, "USER": user, "LOGNAME": user, "SHELL": BASH, "LC_ALL": "C"}


def hostname() -> str:
    """This machine's name, as results name it (``socket.gethostname()``)."""
    return socket.gethostname()


def _command_name(command: str) -> str:
    first = command.strip().split("\n", 1)[0]
    return "`" + (first if len(first) <= 80 else first[:77] + "...") + "`"


class _Reader:
    """Both pipes of a process read on their own threads into one bounded buffer each (a process that fills
    one pipe while we wait on the other never blocks); ``over`` once their sum passes ``limit``."""

    def __init__(self, proc: subprocess.Popen[bytes], limit: int) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.limit = limit
        self.over = False
        self.changed = threading.Condition()
        assert proc.stdout is not None and proc.stderr is not None  # noqa: S101 - Popen(stdout=PIPE, stderr=PIPE)
        self._threads = [
            threading.Thread(target=self._pump, args=(proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._pump, args=(proc.stderr, self.err), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, pipe: IO[bytes], into: bytearray) -> None:
        with pipe:
            while data := pipe.read1(65536):  # type: ignore[attr-defined]
                with self.changed:
                    if len(self.out) + len(self.err) + len(data) > self.limit:
                        self.over = True
                    else:
                        into += data
                    self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def ended(self, within: float) -> bool:
        """Both pipes at their end (the process and whatever it left running closed them)."""
        deadline = time.monotonic() + within
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        return not any(t.is_alive() for t in self._threads)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The process and its group (``start_new_session``): what a timed-out command started dies with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()


class _Held:
    """A hold's process as channels.Heartbeat sees a channel: ``closed``, ``sendall``, ``close``."""

    def __init__(self, proc: subprocess.Popen[bytes], reader: _Reader) -> None:
        self.proc = proc
        self.reader = reader
        self.closed = False

    def sendall(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is not None and not self.closed:
            stdin.write(data)
            stdin.flush()

    def close(self) -> None:
        """Close its stdin (the lock holder lets go at EOF, as when ssh.py closes the channel); kill what is
        still running after a grace period."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill(self.proc)


class _PipeLines:
    """A followed process's stdout as :class:`~remediate.transport.base.Followed` (select on the pipe)."""

    def __init__(self, proc: subprocess.Popen[bytes], host: str) -> None:
        assert proc.stdout is not None  # noqa: S101 - Popen(stdout=PIPE)
        self.fd, self.host = proc.stdout.fileno(), host
        self._lines = Lines(MAX_FOLLOW_LINE_BYTES)

    def lines(self, timeout: float) -> list[bytes]:
        if not self._lines.ready:
            readable, _, _ = select.select([self.fd], [], [], max(timeout, 0.0))
            if not readable:
                return []
            data = os.read(self.fd, 65536)
            if not data:
                raise ConnectionLost(self.host, "the followed command ended")
            self._lines.feed(data)
        return self._lines.take(MAX_FOLLOW_LINES)


class LocalTransport(Holds):
    """This machine as a host: subprocesses and local sockets behind the Transport protocol."""

    def __init__(self, host: str | None = None, *, require_root: bool = True) -> None:
        self.host = host or hostname()
        self.require_root = require_root
        self._holds: list[Hold] = []
        self._beat = Heartbeat(self._holds, HEARTBEAT_S, self.host)

    def open(self) -> None:
        """Nothing to connect; the user must be root (units, daemon-reload, restarts) unless told otherwise."""
        if self.require_root and os.geteuid() != 0:
            raise AuthError(self.host, "--local must run as root (it writes units and restarts them): run it with sudo")

    def open_ahead(self) -> None:
        """Nothing to connect ahead."""

    def preconnected(self, pre: Preconnect) -> None:
        """No TCP connection to adopt: closed."""
        pre.close()

    def _spawn(self, command: str) -> subprocess.Popen[bytes]:
        self.open()
        try:
            return subprocess.Popen(  # noqa: S603 - the command is the caller's, quoted for bash as over SSH
                [BASH, "-c", command],
                env=login_environment(),  # never the caller's: BASH_ENV, BASH_FUNC_*, PATH stay out
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise TransportError(self.host, f"cannot start bash: {exc}") from exc

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> CommandResult:
        """Run ``command`` with ``bash -c``; never raises on non-zero exit. ``timeout`` (else
        :data:`COMMAND_TIMEOUT_S`) is total: past it the command's process group is killed and ConnectionLost
        raised (as over SSH, its outcome is unknown). More than :data:`MAX_OUTPUT_BYTES` of output: killed,
        TransportError."""
        total = COMMAND_TIMEOUT_S if timeout is None else timeout
        what = _command_name(command)
        deadline = time.monotonic() + total
        proc = self._spawn(command)
        reader = _Reader(proc, MAX_OUTPUT_BYTES)
        try:
            feeder = threading.Thread(target=self._feed, args=(proc, stdin), daemon=True)
            feeder.start()
            with reader.changed:
                while not reader.over and (proc.poll() is None or not reader.ended(0.0)):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    reader.changed.wait(min(left, 0.05))
            if reader.over:
                raise TransportError(self.host, f"{what}: more than {MAX_OUTPUT_BYTES} bytes of output; stopped")
            if proc.poll() is None or not reader.ended(0.0):
                raise ConnectionLost(self.host, f"{what}: timed out after {total:.0f}s")
            exited = proc.wait()
        finally:
            if proc.poll() is None or not reader.ended(0.0):
                _kill(proc)
        return CommandResult(
            argv=command,
            exited=exited,
            stdout=bytes(reader.out).decode("utf-8", "replace"),
            stderr=bytes(reader.err).decode("utf-8", "replace"),
        )

    @staticmethod
    def _feed(proc: subprocess.Popen[bytes], stdin: str | None) -> None:
        pipe = proc.stdin
        if pipe is None:
            return
        with contextlib.suppress(OSError):  # the command exited without reading it all: its status says why
            if stdin is not None:
                pipe.write(stdin.encode("utf-8"))
            pipe.close()

    def _start_hold(self, held: Hold, timeout: float, command: str | None = None) -> None:
        command = command or held.command
        marker = held.ready.encode() + b"\n"
        proc = self._spawn(command)
        reader = _Reader(proc, MAX_OUTPUT_BYTES)
        held.chan = _Held(proc, reader)
        deadline = time.monotonic() + timeout
        try:
            with reader.changed:
                while not (reader.out.startswith(marker) or b"\n" + marker in reader.out):
                    if reader.over:
                        raise TransportError(self.host, f"more than {MAX_OUTPUT_BYTES} bytes before {held.ready!r}")
                    if proc.poll() is not None and reader.ended(0.0):
                        out, err = (
                            bytes(reader.out).decode("utf-8", "replace"),
                            bytes(reader.err).decode("utf-8", "replace"),
                        )
                        raise CommandError(self.host, "hold", CommandResult(command, proc.returncode, out, err))
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise ConnectError(self.host, f"no {held.ready!r} from the host within {timeout:.0f}s")
                    reader.changed.wait(min(left, 0.05))
                held.output = bytes(reader.out).decode("utf-8", "replace")
        except BaseException:
            held.chan.close()
            raise

    def reconnect(self, within: float) -> None:
        """No connection to make again: holds still running are kept; one whose process ended is taken back
        (its :class:`Retake`, whose ``expect`` line is required, else ``command`` again), as ssh.py does."""
        deadline = time.monotonic() + max(within, 1.0)
        for held in list(self._holds):
            chan = held.chan
            if isinstance(chan, _Held) and chan.proc.poll() is None:
                continue
            if chan is not None:
                chan.close()
            self._take_back(held, deadline)

    @contextmanager
    def follow(self, command: str) -> Iterator[Followed]:
        """Run ``command`` with ``bash -c`` (its own process group), its stdout read line by line as it
        arrives (bounded: channels.py ``Lines``); leaving the context closes its stdin and kills the group."""
        proc = self._spawn(command)
        try:
            yield _PipeLines(proc, self.host)
        finally:
            _kill(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()

    def http_get(self, host: str, port: int, path: str, *, timeout: float = 5.0) -> HttpResponse:
        """GET http://host:port/path from this machine; ``status=None`` while the port refuses connections, and
        when the answer is not complete within ``timeout`` (total) or larger than :data:`MAX_DOCUMENT_BYTES`."""
        with self.http_stream(host, port, path, None, timeout=timeout, method="GET", max_body=MAX_DOCUMENT_BYTES) as s:
            return s.response()

    def http_post(self, host: str, port: int, path: str, body: bytes = b"", *, timeout: float = 30.0) -> HttpResponse:
        """POST ``body`` and read the whole answer (at most :data:`MAX_DOCUMENT_BYTES`)."""
        with self.http_stream(host, port, path, body, timeout=timeout, max_body=MAX_DOCUMENT_BYTES) as stream:
            data = stream.read()
        if stream.status is None or stream.error:
            return HttpResponse(status=stream.status, body=data, error=stream.error)
        return HttpResponse(status=stream.status, body=data)

    @contextmanager
    def http_stream(
        self,
        host: str,
        port: int,
        path: str,
        body: bytes | None,
        *,
        timeout: float = 600.0,
        method: str = "POST",
        max_body: int = MAX_STREAM_BYTES,
    ) -> Iterator[HttpStream]:
        """Send a request over a TCP socket and read the answer as it arrives (``time.perf_counter()``);
        ``status`` is None while the port refuses connections. ``timeout`` is total (connect included); the
        body is capped at ``max_body`` bytes."""
        clock = time.perf_counter
        deadline = time.monotonic() + timeout
        where = f"{host}:{port}{path}"
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            yield HttpStream(lambda: b"", clock, clock(), error=f"{host}:{port}: {exc.strerror or exc}")
            return
        try:
            left = max(deadline - time.monotonic(), 0.001)
            request = request_bytes(method, host, port, path, body)
            yield exchange(sock, request, where, total=left, max_body=max_body, clock=clock)
        finally:
            sock.close()

    def close(self) -> None:
        """Ends every hold still open (their context exits do it too)."""
        for held in list(self._holds):
            if held.chan is not None:
                held.chan.close()
