"""PURE: sglang's streaming ``/generate`` as server-sent events.

sglang writes ``data: <json>\\n\\n`` per chunk and ``data: [DONE]\\n\\n`` at the end (sglang
entrypoints/http_server.py ``generate_request``); a ``ValueError`` mid-stream becomes ``data: {"error":
{...}}``. Every chunk's ``meta_info`` carries ``prompt_tokens``, ``completion_tokens`` (so far) and
``cached_tokens``; the last one ``e2e_latency`` and ``finish_reason``. The decoder follows the SSE rules
sglang relies on: ``data:`` lines (one optional space after the colon) accumulate until a blank line; comments
and other fields are ignored; ``\\r\\n`` line ends are accepted. Arrival times come in with the bytes (the
transport takes them), so each event carries the time of the bytes that completed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from remediate.core.jsondoc import DocumentError, parse_document

DONE = "[DONE]"
MAX_LINE_BYTES = 1024 * 1024  # one line or one event: sglang sends a few KiB per chunk (its text so far)


class StreamError(ValueError):
    """The stream is not what sglang sends (bad JSON, not an object)."""


@dataclass(frozen=True)
class StreamChunk:
    """One ``data:`` event: a decoded chunk, or ``done`` for ``[DONE]``; ``at`` is its arrival time."""

    at: float
    data: dict[str, Any]
    done: bool = False

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.data.get("meta_info")
        return meta if isinstance(meta, dict) else {}

    def _count(self, key: str) -> int | None:
        value = self.meta.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def prompt_tokens(self) -> int | None:
        return self._count("prompt_tokens")

    @property
    def completion_tokens(self) -> int | None:
        return self._count("completion_tokens")

    @property
    def cached_tokens(self) -> int | None:
        return self._count("cached_tokens")

    @property
    def server_e2e_latency(self) -> float | None:
        value = self.meta.get("e2e_latency")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    @property
    def finish_reason(self) -> dict[str, Any] | None:
        value = self.meta.get("finish_reason")
        return value if isinstance(value, dict) else None

    @property
    def error(self) -> str | None:
        """The message of an ``{"error": …}`` chunk or of an ``abort`` finish reason."""
        err = self.data.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        if err is not None:
            return str(err)
        reason = self.finish_reason
        if reason and reason.get("type") == "abort":
            return str(reason.get("message") or "request aborted")
        return None

    @property
    def has_token(self) -> bool:
        """A token arrived with this chunk: completion_tokens ≥ 1 (else non-empty text or output ids)."""
        count = self.completion_tokens
        if count is not None:
            return count >= 1
        return bool(self.data.get("text") or self.data.get("output_ids"))


class SSEDecoder:
    """Incremental decoder: feed body bytes as they arrive, get the events they complete."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._size = 0

    def feed(self, at: float, data: bytes) -> list[StreamChunk]:
        self._buffer += data
        events: list[StreamChunk] = []
        while True:
            line, sep, rest = self._buffer.partition(b"\n")
            if not sep:
                if len(self._buffer) > MAX_LINE_BYTES:
                    raise StreamError(f"a line longer than {MAX_LINE_BYTES} bytes: not sglang's stream")
                break
            self._buffer = rest
            event = self._line(at, line.removesuffix(b"\r"))
            if event is not None:
                events.append(event)
        return events

    def close(self, at: float) -> list[StreamChunk]:
        """The body ended: a last event without its blank line still counts."""
        events: list[StreamChunk] = []
        if self._buffer:
            event = self._line(at, self._buffer.removesuffix(b"\r"))
            self._buffer = b""
            if event is not None:
                events.append(event)
        event = self._line(at, b"")
        if event is not None:
            events.append(event)
        return events

    def _line(self, at: float, line: bytes) -> StreamChunk | None:
        if not line:
            return self._dispatch(at)
        if line.startswith(b":"):
            return None  # a comment (keep-alive)
        if len(line) > MAX_LINE_BYTES:
            raise StreamError(f"a line longer than {MAX_LINE_BYTES} bytes: not sglang's stream")
        field, _, value = line.partition(b":")
        if field == b"data":
            self._data.append(value.removeprefix(b" "))
            self._size += len(value)
            if self._size > MAX_LINE_BYTES:
                raise StreamError(f"an event longer than {MAX_LINE_BYTES} bytes: not sglang's stream")
        return None

    def _dispatch(self, at: float) -> StreamChunk | None:
        if not self._data:
            return None
        payload = b"\n".join(self._data).strip()
        self._data = []
        self._size = 0
        if payload == DONE.encode():
            return StreamChunk(at=at, data={}, done=True)
        try:
            data = parse_document(payload)
        except DocumentError as exc:
            raise StreamError(f"a chunk is not JSON ({exc}): {payload[:80]!r}") from exc
        if not isinstance(data, dict):
            raise StreamError(f"a chunk is not a JSON object: {payload[:80]!r}")
        return StreamChunk(at=at, data=data)


def decode_stream(pieces: Iterable[tuple[float, bytes]], end: float | None = None) -> Iterator[StreamChunk]:
    """Every event of a whole body given as (arrival time, bytes) pieces."""
    decoder = SSEDecoder()
    last = 0.0
    for at, data in pieces:
        last = at
        yield from decoder.feed(at, data)
    yield from decoder.close(last if end is None else end)
