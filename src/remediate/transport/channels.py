"""Session-channel helpers of transport/ssh.py that need no paramiko import: a held command's record and
the drain of a command's output, a followed command's bounded lines. ``chan`` is a paramiko Channel."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from remediate.errors import CommandError, ConnectionLost, TransportError
from remediate.models import CommandResult
from remediate.transport.base import MAX_FOLLOW_LINE_BYTES, MAX_FOLLOW_LINES, MAX_OUTPUT_BYTES, Retake


@dataclass
class Hold:
    """A command kept running for a context (``SSHTransport.hold``), restarted after a reconnect."""

    command: str
    ready: str
    timeout: float
    chan: Any = None  # the paramiko Channel it runs on now
    output: str = ""  # what it printed up to and including ``ready`` (the locked read, for the probe)
    again: Callable[[str], Retake] | None = None  # how a reconnect takes it back (default: ``command``)


class Heartbeat:
    """While any hold is open: a newline on each hold's stdin every ``every`` seconds, from a daemon thread
    (templates/probe.sh.j2's holder gives up the lock when none comes for its heartbeat_timeout: a half-open
    connection never keeps a lock for hours). Send errors are ignored: a dead connection is ConnectionLost
    where a command runs."""

    def __init__(self, holds: list[Hold], every: float, host: str) -> None:
        self._holds = holds
        self._every = every
        self._name = f"heartbeat-{host}"
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._beat, name=self._name, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while self._holds:
            time.sleep(self._every)
            for held in list(self._holds):
                chan = held.chan
                if chan is None or chan.closed:
                    continue
                try:
                    chan.sendall(b"\n")
                except Exception:  # noqa: BLE001, S110 - the run notices a dead connection where it waits
                    pass


class Holds:
    """``hold`` as both transports keep it: the command started by the transport's own ``_start_hold`` (a
    session channel over SSH, a process group locally), listed in ``_holds`` for the heartbeat and for
    ``reconnect``, and closed when the context ends."""

    _holds: list[Hold]
    _beat: Heartbeat

    def _start_hold(self, held: Hold, timeout: float, command: str | None = None) -> None:
        raise NotImplementedError

    host: str

    def _take_back(self, held: Hold, deadline: float) -> None:
        """After a reconnect: start ``held`` again (its ``again`` command when it has one, which must print its
        ``expect`` line before ``ready``, else CommandError: no hold is ever taken back without it)."""
        if held.again is None:
            self._start_hold(held, max(deadline - time.monotonic(), 0.0) + held.timeout)
            return
        retake = held.again(held.output)
        first = held.output
        self._start_hold(held, max(deadline - time.monotonic(), 0.0) + retake.timeout, retake.command)
        taken, held.output = held.output, first
        if retake.expect not in taken.splitlines():
            if held.chan is not None:
                held.chan.close()
            result = CommandResult(retake.command, 0, taken, f"no {retake.expect!r} before {held.ready!r}")
            raise CommandError(self.host, "hold taken back", result)

    @contextmanager
    def hold(
        self, command: str, *, ready: str, timeout: float, again: Callable[[str], Retake] | None = None
    ) -> Iterator[str]:
        """Keep ``command`` running for the duration of the context, once it printed the line ``ready``;
        closing its channel (or losing the connection) ends it, so a lock it holds can never outlive this
        process. A heartbeat line goes to its stdin every heartbeat period (the lock holder gives up when none
        comes: a half-open connection never holds a lock for long). After ``reconnect`` it is taken back
        (``again``: its own command for that)."""
        held = Hold(command, ready, timeout, again=again)
        self._start_hold(held, timeout)
        self._holds.append(held)
        self._beat.start()
        try:
            yield held.output
        finally:
            self._holds.remove(held)
            if held.chan is not None:
                held.chan.close()


def drain(
    chan: Any, host: str, timeout: float | None, *, what: str = "remote command", limit: int = MAX_OUTPUT_BYTES
) -> tuple[bytes, bytes]:
    """Read stdout and stderr until the command has exited AND its output has ended (EOF or close).

    The exit status may arrive while output is still in flight (seen on real sshd: a listing cut mid-line
    with exit 0), so the exit status alone never ends the read. ``timeout`` is total, up to the end of the
    output (ConnectionLost past it); more than ``limit`` bytes of output is a TransportError (a runaway command
    must not fill the controller's memory). Both name ``what`` (the command)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    out: list[bytes] = []
    err: list[bytes] = []
    size = 0
    while True:
        got = False
        # one piece of each per turn: a command that prints without pause still meets the deadline and the cap
        if chan.recv_ready():
            out.append(chan.recv(65536))
            size += len(out[-1])
            got = True
        if chan.recv_stderr_ready():
            err.append(chan.recv_stderr(65536))
            size += len(err[-1])
            got = True
        if size > limit:
            raise TransportError(host, f"{what}: more than {limit} bytes of output; stopped reading")
        ended = chan.eof_received or chan.closed
        if chan.exit_status_ready() and ended and not chan.recv_ready() and not chan.recv_stderr_ready():
            break
        if deadline is not None and time.monotonic() > deadline:
            raise ConnectionLost(host, f"{what}: timed out after {timeout:.0f}s")
        if not got:
            chan.status_event.wait(0.01)
    return b"".join(out), b"".join(err)


class Lines:
    """Bytes as they arrive → complete lines, bounded: a line past ``max_line`` bytes is cut there and the
    rest of it dropped up to its newline, so the buffer never holds more than ``max_line`` bytes."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._part = bytearray()
        self._dropping = False
        self.ready: list[bytes] = []

    def feed(self, data: bytes) -> None:
        while data:
            end = data.find(b"\n")
            piece, data = (data, b"") if end < 0 else (data[:end], data[end + 1 :])
            if not self._dropping:
                room = self.max_line - len(self._part)
                self._part += piece[:room]
                if len(piece) > room:
                    self.ready.append(bytes(self._part))
                    self._part.clear()
                    self._dropping = True
            if end >= 0:
                if not self._dropping:
                    self.ready.append(bytes(self._part))
                self._part.clear()
                self._dropping = False

    def take(self, most: int) -> list[bytes]:
        taken, self.ready = self.ready[:most], self.ready[most:]
        return taken


class ChannelLines:
    """A followed command's SSH session channel as :class:`~remediate.transport.base.Followed` (ssh.py)."""

    def __init__(self, chan: Any, host: str) -> None:
        self.chan, self.host = chan, host
        self._lines = Lines(MAX_FOLLOW_LINE_BYTES)

    def lines(self, timeout: float) -> list[bytes]:
        if not self._lines.ready:
            self.chan.settimeout(max(timeout, 0.001))
            try:
                data = self.chan.recv(65536)
            except TimeoutError:
                return []
            except OSError as exc:
                raise ConnectionLost(self.host, f"the followed command's channel: {exc}") from exc
            if not data:
                raise ConnectionLost(self.host, "the followed command ended")
            self._lines.feed(data)
        return self._lines.take(MAX_FOLLOW_LINES)
