"""Answers from a host are bounded: JSON depth (core/jsondoc.py), SSE line length (core/bench/stream.py), a command's
output size and total time (transport/channels.drain)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from remediate.core.bench.stream import MAX_LINE_BYTES, StreamError, decode_stream
from remediate.core.jsondoc import MAX_DEPTH, DocumentError, parse_document
from remediate.errors import ConnectionLost, TransportError
from remediate.transport.channels import drain


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_json_nested_100000_deep_is_a_document_error_not_a_recursion_error() -> None:
    with pytest.raises(DocumentError, match="deeper than 64"):
        parse_document(nested(100_000))


def test_json_at_the_depth_limit_parses_and_one_deeper_is_refused() -> None:
    assert parse_document(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))
    with pytest.raises(DocumentError):
        parse_document(nested(MAX_DEPTH + 1))


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"text": "[" * 1000 + '\\"{' * 100, "ids": [[1, 2], [3]]})
    assert parse_document(text)["ids"] == [[1, 2], [3]]


def test_a_deep_object_is_refused_too() -> None:
    deep = '{"a":' * 100 + "1" + "}" * 100
    with pytest.raises(DocumentError):
        parse_document(deep)


def test_bad_json_is_a_document_error() -> None:
    with pytest.raises(DocumentError, match="not JSON"):
        parse_document(b"{")


def test_a_nested_sse_chunk_is_a_stream_error() -> None:
    with pytest.raises(StreamError, match="not JSON"):
        list(decode_stream([(0.0, b"data: " + nested(100_000) + b"\n\n")]))


def test_an_endless_sse_line_is_cut_at_its_cap() -> None:
    pieces = ((float(i), b"data: " + b"x" * 65536) for i in range(10_000))  # 640 MiB, never a newline
    with pytest.raises(StreamError, match="longer than"):
        list(decode_stream(pieces))


def test_an_sse_event_of_many_lines_is_capped_too() -> None:
    line = b"data: " + b"x" * 60_000 + b"\n"
    with pytest.raises(StreamError, match="event longer than"):
        list(decode_stream([(0.0, line * (MAX_LINE_BYTES // 60_000 + 2))]))


class Runaway:
    """A session channel whose command prints without pause and never exits."""

    def __init__(self, *, pause: float = 0.0, reads: int = 100_000) -> None:
        self.eof_received = False
        self.closed = False
        self.status_event = threading.Event()
        self.pause = pause
        self.reads = reads  # past this, a reader that ignores its bounds is caught, not left spinning

    def exit_status_ready(self) -> bool:
        return False

    def recv_ready(self) -> bool:
        return True

    def recv(self, n: int) -> bytes:
        self.reads -= 1
        assert self.reads > 0, "read on past its cap and deadline"
        if self.pause:
            time.sleep(self.pause)
        return b"y\n" * (n // 2)

    def recv_stderr_ready(self) -> bool:
        return False

    def recv_stderr(self, n: int) -> bytes:
        return b""


def test_a_runaway_commands_output_is_capped_naming_host_and_command() -> None:
    with pytest.raises(TransportError, match=r"gpu-0: `yes`: more than 1048576 bytes of output") as caught:
        drain(Runaway(), "gpu-0", 60, what="`yes`", limit=1 << 20)
    assert not isinstance(caught.value, ConnectionLost)


def test_the_deadline_is_total_even_while_output_keeps_coming() -> None:
    with pytest.raises(ConnectionLost, match=r"gpu-0: `yes`: timed out after 0s"):
        drain(Runaway(pause=0.001, reads=5000), "gpu-0", 0.2, what="`yes`", limit=1 << 40)
