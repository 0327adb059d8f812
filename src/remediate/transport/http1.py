"""HTTP/1.1 framing over a byte channel (no sockets here): requests out, responses in, incrementally.

The SSH transport sends requests down a ``direct-tcpip`` channel and reads the answer through
:class:`HttpStream`, which takes the arrival time of every piece of the body (the benchmark measures
TTFT and inter-token gaps from them). Bodies are delimited by ``Transfer-Encoding: chunked`` (sglang's
streaming ``/generate``), ``Content-Length``, or the connection closing.

The server and the network are not trusted: every answer is bounded in size (the head at
:data:`MAX_HEAD_BYTES`, a JSON document at :data:`MAX_DOCUMENT_BYTES`, a stream at :data:`MAX_STREAM_BYTES`)
and in time (:func:`channel_recv` keeps one total deadline across every read, on the monotonic clock, besides
the wait for each piece): a peer that trickles one byte a second is cut at the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

MAX_HEAD_BYTES = 64 * 1024  # status line and headers: sglang (uvicorn) sends a few hundred bytes
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024  # a JSON answer (/server_info is ~10 KiB; /health is empty)
MAX_STREAM_BYTES = 64 * 1024 * 1024  # a streamed /generate answer (bench, --probe: a few KiB per token)


@dataclass(frozen=True)
class HttpResponse:
    """A response read through the SSH connection (direct-tcpip), or ``status=None`` when refused."""

    status: int | None
    body: bytes
    error: str | None = None


class StreamBroken(Exception):
    """The channel failed while reading (timeout, connection lost); the message says how."""


def channel_recv(
    chan: Any,
    where: str,
    *,
    idle: float,
    total: float,
    errors: tuple[type[BaseException], ...] = (OSError,),
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[], bytes]:
    """A ``recv`` for :class:`HttpStream` over ``chan`` (a paramiko Channel or a socket: ``settimeout`` and
    ``recv``): each read waits at most ``idle`` seconds for bytes, and all reads together end ``total``
    seconds from now (:class:`StreamBroken` naming ``where`` and the bound that was hit)."""
    deadline = clock() + total

    def recv() -> bytes:
        left = deadline - clock()
        if left <= 0:
            raise StreamBroken(f"{where}: no complete answer within {total:.0f}s")
        chan.settimeout(min(idle, left))
        try:
            return bytes(chan.recv(65536))
        except TimeoutError:
            if clock() >= deadline:
                raise StreamBroken(f"{where}: no complete answer within {total:.0f}s") from None
            raise StreamBroken(f"{where}: no data for {idle:.0f}s") from None
        except errors as exc:
            raise StreamBroken(f"{where}: {exc}") from None

    return recv


def request_bytes(
    method: str, host: str, port: int, path: str, body: bytes | None = None, content_type: str = "application/json"
) -> bytes:
    """One request; ``Connection: close`` so the server ends the stream when the answer is complete."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: */*", "Connection: close"]
    if body is not None:
        lines += [f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (body or b"")


def exchange(
    chan: Any,
    request: bytes,
    where: str,
    *,
    total: float,
    max_body: int,
    errors: tuple[type[BaseException], ...] = (OSError,),
    clock: Callable[[], float] = time.perf_counter,
) -> HttpStream:
    """Send ``request`` (:func:`request_bytes`) down ``chan`` (a paramiko Channel or a socket, already
    connected) and read the answer's head: the one HTTP exchange both transports make (ssh.py over a
    direct-tcpip channel, local.py over a TCP socket). Every read ends ``total`` seconds from now; a send that
    fails is ``status=None`` with the error (the caller decides whether its connection died)."""
    recv = channel_recv(chan, where, idle=total, total=total, errors=errors)
    chan.settimeout(total)
    sent_at = clock()
    failures: tuple[type[BaseException], ...] = (TimeoutError, *errors)
    try:
        chan.sendall(request)
    except failures as exc:
        return HttpStream(lambda: b"", clock, sent_at, error=f"{where}: sending failed: {exc or 'timed out'}")
    return HttpStream(recv, clock, sent_at, max_body=max_body)


class _Dechunker:
    """``Transfer-Encoding: chunked`` decoding, fed in arbitrary pieces."""

    def __init__(self) -> None:
        self._buffer = b""
        self._state = "size"  # size line → data (self._left bytes) → the CRLF after it → size line …
        self._left = 0
        self.finished = False

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = bytearray()
        while not self.finished:
            if self._state == "data":
                take = self._buffer[: self._left]
                self._buffer = self._buffer[len(take) :]
                self._left -= len(take)
                out += take
                if self._left:
                    break
                self._state = "crlf"
            elif self._state == "crlf":
                if len(self._buffer) < 2:
                    break
                self._buffer = self._buffer[2:]
                self._state = "size"
            else:
                line, sep, rest = self._buffer.partition(b"\r\n")
                if not sep:
                    break
                self._buffer = rest
                try:
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                except ValueError:
                    raise StreamBroken(f"bad chunk size {line[:20]!r}") from None
                if size == 0:
                    self.finished = True
                else:
                    self._left, self._state = size, "data"
        return bytes(out)


class HttpStream:
    """A response read as it arrives: ``status`` (None when the request never got an answer), headers,
    and :meth:`pieces` — (arrival time, body bytes) as the server sends them.

    ``recv`` returns the next bytes from the channel (``b""`` at its end) or raises :class:`StreamBroken`;
    ``clock`` stamps each piece; ``sent_at`` is when the request was sent, on the same clock."""

    def __init__(
        self,
        recv: Callable[[], bytes],
        clock: Callable[[], float],
        sent_at: float,
        *,
        status: int | None = None,
        error: str | None = None,
        max_body: int = MAX_STREAM_BYTES,
    ) -> None:
        self._recv = recv
        self.max_body = max_body
        self._clock = clock
        self.sent_at = sent_at
        self.status = status
        self.error = error
        self.headers: dict[str, str] = {}
        self.ended_at: float | None = None
        self._first: tuple[float, bytes] | None = None
        if status is None and error is None:
            self._read_head()

    def _read_head(self) -> None:
        raw = b""
        while b"\r\n\r\n" not in raw:
            try:
                data = self._recv()
            except StreamBroken as exc:
                self.error = str(exc)
                return
            if not data:
                self.error = "the connection closed before a response" if not raw else "truncated response head"
                return
            raw += data
            if len(raw) > MAX_HEAD_BYTES and b"\r\n\r\n" not in raw[: MAX_HEAD_BYTES + 4]:
                self.error = f"response head larger than {MAX_HEAD_BYTES} bytes"
                return
        at = self._clock()
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) < 2 or not parts[1].isdigit():
            self.error = f"bad HTTP response: {lines[0]!r}"
            return
        self.status = int(parts[1])
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                self.headers[name.strip().lower()] = value.strip()
        self._first = (at, rest)

    def pieces(self) -> Iterator[tuple[float, bytes]]:
        """The body as it arrives, de-chunked. A broken channel ends it early and sets ``error``."""
        if self._first is None:
            return
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        length_header = self.headers.get("content-length", "")
        remaining = int(length_header) if length_header.isdigit() and not chunked else None
        dechunker = _Dechunker() if chunked else None
        at, data = self._first
        self._first = None
        taken = 0
        while True:
            if data:
                try:
                    body = dechunker.feed(data) if dechunker else data
                except StreamBroken as exc:
                    self.error = str(exc)
                    break
                if remaining is not None:
                    body = body[:remaining]
                    remaining -= len(body)
                taken += len(body)
                if taken > self.max_body:
                    self.error = f"response body larger than {self.max_body} bytes"
                    break
                if body:
                    yield at, body
            if (dechunker and dechunker.finished) or remaining == 0:
                break
            try:
                data = self._recv()
            except StreamBroken as exc:
                self.error = str(exc)
                break
            at = self._clock()
            if not data:
                if dechunker or remaining:
                    self.error = "the connection closed before the response ended"
                break
        self.ended_at = self._clock()

    def read(self) -> bytes:
        """The whole body (up to ``max_body``: past it, what was read and ``error`` set)."""
        return b"".join(data for _, data in self.pieces())

    def response(self) -> HttpResponse:
        """The whole answer as a value: a cut or oversized answer is ``status=None`` with the error (a failed
        poll), never a truncated body taken for the document."""
        if self.status is None:
            return HttpResponse(status=None, body=b"", error=self.error)
        body = self.read()
        if self.error:
            return HttpResponse(status=None, body=b"", error=self.error)
        return HttpResponse(status=self.status, body=body)
