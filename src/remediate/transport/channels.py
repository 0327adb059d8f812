"""Session-channel helpers of transport/ssh.py that need no paramiko import: a held command's record and
the drain of a command's output. ``chan`` is a paramiko Channel."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from remediate.errors import ConnectionLost, TransportError
from remediate.transport.base import MAX_OUTPUT_BYTES


@dataclass
class Hold:
    """A command kept running for a context (``SSHTransport.hold``), restarted after a reconnect."""

    command: str
    ready: str
    timeout: float
    chan: Any = None  # the paramiko Channel it runs on now
    output: str = ""  # what it printed up to and including ``ready`` (the locked read, for the probe)


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
