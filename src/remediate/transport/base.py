"""The Transport protocol and its value types."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from remediate.core.bounds import check_option
from remediate.models import CommandResult
from remediate.transport.http1 import HttpResponse, HttpStream

if TYPE_CHECKING:  # the name only: the protocol is read by every layer, the socket code loads where it is used
    from remediate.transport.preconnect import Preconnect

__all__ = ["CommandResult", "Followed", "HttpResponse", "Retake", "SSHOptions", "Transport", "parse_http"]


@dataclass(frozen=True)
class Retake:
    """How a ``hold`` is taken back after a reconnect: its own command (e.g. the lock, for the unit the first
    run found, waiting for a commit of this run first), the line it must print before ``ready`` (else
    CommandError: no hold is ever taken back without it), and how long it may take."""

    command: str
    expect: str
    timeout: float


# Every answer read from a host is bounded (the host, the network and the server's output are not trusted):
MAX_OUTPUT_BYTES = 64 * 1024 * 1024  # a command's stdout plus stderr (transport.run): past it, CommandError
MAX_FOLLOW_LINE_BYTES = 64 * 1024  # a followed command's line: longer ones are cut there (the rest dropped)
MAX_FOLLOW_LINES = 1000  # lines one Followed.lines() call returns at most; the rest wait in the channel
# HTTP answers: transport/http1.py (MAX_HEAD_BYTES, MAX_DOCUMENT_BYTES, MAX_STREAM_BYTES, the total deadline).


@dataclass(frozen=True)
class SSHOptions:
    """How to reach hosts; shared by every remote command."""

    identity: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    ssh_config: str | None = None
    sudo: bool = False
    connect_timeout: float = 10.0
    connect_attempts: int = 3
    user: str | None = None
    port: int | None = None

    def __post_init__(self) -> None:
        check_option("connect_timeout", self.connect_timeout)  # as --connect-timeout (core/bounds.py)


class Followed(Protocol):
    """A followed command's output (:meth:`Transport.follow`), read line by line as it arrives."""

    def lines(self, timeout: float) -> list[bytes]:
        """The complete lines that arrived within ``timeout`` seconds (returns once some did; [] when none):
        each cut at :data:`MAX_FOLLOW_LINE_BYTES`, at most :data:`MAX_FOLLOW_LINES` per call. ConnectionLost
        once the command's output ended (it exited, or the connection died)."""
        ...


class Transport(Protocol):
    """One connection to one host, reused for every step of a remediation."""

    host: str

    def open(self) -> None:
        """Connect (host key verified) and authenticate; idempotent."""
        ...

    def open_ahead(self) -> None:
        """Start connecting in the background: :meth:`open` waits for it and raises what it raised. A
        transport that has no background connect does nothing here and connects in :meth:`open`."""
        ...

    def preconnected(self, pre: Preconnect) -> None:
        """A TCP connection already under way (transport/preconnect.py), for the first connect to adopt; a
        transport that cannot use it closes it (``pre.close()``)."""
        ...

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> CommandResult:
        """Run a shell command (already quoted) on the host; never raises on non-zero exit. ``timeout`` is total
        (from sending the command to the end of its output; ConnectionLost past it); output beyond
        :data:`MAX_OUTPUT_BYTES` is a TransportError naming the host and the command."""
        ...

    def hold(
        self, command: str, *, ready: str, timeout: float, again: Callable[[str], Retake] | None = None
    ) -> AbstractContextManager[str]:
        """Run ``command`` until the context exits, once it printed the line ``ready`` (e.g. a lock it took
        and keeps while its stdin stays open); the context's value is its stdout up to that line, included.
        If it exits first: CommandError with its result. ``again(first output)``: what :meth:`reconnect`
        runs to take it back (default: ``command`` again)."""
        ...

    def follow(self, command: str) -> AbstractContextManager[Followed]:
        """Run a long-lived command (e.g. ``journalctl -f``) on its own channel of the connection, its output
        read as it arrives, bounded in memory whatever it prints; leaving the context ends it (its stdin is
        closed, then the channel or process group). Every byte is the host's: untrusted."""
        ...

    def http_get(self, host: str, port: int, path: str, *, timeout: float = 5.0) -> HttpResponse:
        """GET http://host:port/path as seen from the remote host, through the SSH connection. ``timeout`` is
        total (connect, request, head and body); a body past ``MAX_DOCUMENT_BYTES``, a cut or a late answer
        is ``status=None`` with the error."""
        ...

    def http_post(self, host: str, port: int, path: str, body: bytes = b"", *, timeout: float = 30.0) -> HttpResponse:
        """POST ``body`` (JSON) to http://host:port/path as seen from the remote host; the whole answer."""
        ...

    def http_stream(
        self, host: str, port: int, path: str, body: bytes | None, *, timeout: float = 600.0, method: str = "POST"
    ) -> AbstractContextManager[HttpStream]:
        """Send a request and read the answer as it arrives, each piece with its arrival time. ``timeout``
        is total (the whole answer arrives within it); the body is capped at ``MAX_STREAM_BYTES``."""
        ...

    def reconnect(self, within: float) -> None:
        """After a lost connection: connect again (capped backoff, for at most ``within`` seconds) and take
        back every ``hold`` still open (the unit's lock). ConnectError when it cannot."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


def parse_http(raw: bytes) -> HttpResponse:
    """An HTTP/1.0 response as read off a channel: status line and body (``status=None`` if unparsable)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return HttpResponse(status=None, body=raw, error=f"bad HTTP response: {status_line!r}")
    return HttpResponse(status=int(parts[1]), body=body)
