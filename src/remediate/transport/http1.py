"""HTTP/1.1 framing over a byte channel (no sockets here): requests out, responses in, incrementally.

The SSH transport sends requests down a ``direct-tcpip`` channel and reads the answer through
:class:`HttpStream`, which takes the arrival time of every piece of the body (the benchmark measures
TTFT and inter-token gaps from them). Bodies are delimited by ``Transfer-Encoding: chunked`` (sglang's
streaming ``/generate``), ``Content-Length``, or the connection closing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

_MAX_HEAD = 64 * 1024


class StreamBroken(Exception):
    """The channel failed while reading (timeout, connection lost); the message says how."""


def request_bytes(
    method: str, host: str, port: int, path: str, body: bytes | None = None, content_type: str = "application/json"
) -> bytes:
    """One request; ``Connection: close`` so the server ends the stream when the answer is complete."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: */*", "Connection: close"]
    if body is not None:
        lines += [f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (body or b"")


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
    ) -> None:
        self._recv = recv
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
            if len(raw) > _MAX_HEAD:
                self.error = "response head too large"
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
        """The whole body."""
        return b"".join(data for _, data in self.pieces())
