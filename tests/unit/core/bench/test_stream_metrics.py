"""sglang's SSE stream, per-request metrics like bench_serving's, and the HTTP/1.1 framing under them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediate.core.bench.latency import measure_request, percentile, summarize
from remediate.core.bench.stream import SSEDecoder, StreamError, decode_stream
from remediate.transport.http1 import HttpStream, StreamBroken, request_bytes


def chunk(completion: int, *, prompt: int = 1024, cached: int = 0, final: bool = False, text: str = "w") -> bytes:
    meta: dict[str, object] = {
        "id": "r1",
        "finish_reason": {"type": "length", "length": 4} if final else None,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
    }
    if final:
        meta["e2e_latency"] = 1.25
    return b"data: " + json.dumps({"text": text, "output_ids": [1], "meta_info": meta}).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def test_decoder_splits_events_across_arbitrary_pieces() -> None:
    body = chunk(1) + b": keep-alive\n\n" + chunk(2).replace(b"\n", b"\r\n") + DONE
    for size in (1, 3, 7, len(body)):
        decoder = SSEDecoder()
        events = []
        for i in range(0, len(body), size):
            events += decoder.feed(float(i), body[i : i + size])
        events += decoder.close(999.0)
        assert [e.completion_tokens for e in events[:2]] == [1, 2]
        assert events[-1].done and len(events) == 3


def test_decoder_last_event_without_blank_line_and_bad_json() -> None:
    events = list(decode_stream([(1.0, chunk(1)), (2.0, b"data: [DONE]")]))
    assert events[-1].done and events[-1].at == 2.0
    with pytest.raises(StreamError):
        list(decode_stream([(1.0, b"data: {nope\n\n")]))
    with pytest.raises(StreamError):
        list(decode_stream([(1.0, b"data: [1, 2]\n\n")]))


def test_metrics_like_bench_serving() -> None:
    # sent at 10.0; tokens at 10.5 (TTFT), 10.6, 10.8 (a 2-token chunk: ITL spread), DONE at 10.81
    pieces = [(10.5, chunk(1)), (10.6, chunk(2)), (10.8, chunk(4, final=True)), (10.81, DONE)]
    m = measure_request(10.0, list(decode_stream(pieces)), ended_at=10.82)
    assert m.ok and m.completion_tokens == 4 and m.prompt_tokens == 1024 and m.cached_tokens == 0
    assert m.ttft_s == pytest.approx(0.5)
    assert m.itl_s == pytest.approx((0.1, 0.1, 0.1))
    assert m.decode_wall_s == pytest.approx(0.3)
    assert m.decode_tok_s == pytest.approx(3 / 0.3)
    assert m.prefill_tok_s == pytest.approx(1024 / 0.5)
    assert m.e2e_s == pytest.approx(0.82) and m.server_e2e_s == 1.25 and m.finish == "length"


def test_prefill_counts_only_uncached_tokens() -> None:
    m = measure_request(0.0, list(decode_stream([(0.5, chunk(1, cached=512, final=True)), (0.6, DONE)])))
    assert m.prefill_tok_s == pytest.approx(512 / 0.5) and m.decode_tok_s is None


def test_stream_failures_are_errors() -> None:
    cut = measure_request(0.0, list(decode_stream([(0.5, chunk(1)), (0.6, chunk(2))])))
    assert not cut.ok and "before [DONE]" in (cut.error or "")
    nothing = measure_request(0.0, list(decode_stream([(0.5, DONE)])))
    assert nothing.error == "the stream ended without a token"
    err = b'data: {"error": {"message": "boom", "code": 400}}\n\n'
    assert measure_request(0.0, list(decode_stream([(0.5, chunk(1)), (0.6, err)]))).error == "boom"
    abort = b'data: {"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "gone"}}}\n\n'
    assert measure_request(0.0, list(decode_stream([(0.5, abort)]))).error == "gone"


def test_chunks_without_counters_count_one_token_each() -> None:
    bare = [(t, b"data: " + json.dumps({"text": "x" * i}).encode() + b"\n\n") for i, t in enumerate((1.0, 2.0, 4.0), 1)]
    m = measure_request(0.0, list(decode_stream([*bare, (4.1, DONE)])))
    assert m.completion_tokens == 3 and m.ttft_s == 1.0 and m.itl_s == (1.0, 2.0)


def test_percentiles_match_numpy_linear() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([0.4, 0.5, 0.9], 99) == pytest.approx(0.892)
    assert percentile([7.0], 99) == 7.0
    s = summarize([None, 2.0, 1.0])
    assert (s.mean, s.median, s.p90) == (1.5, 1.5, pytest.approx(1.9))
    assert summarize([None]).median is None
    with pytest.raises(ValueError):
        percentile([], 50)


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_within_bounds(values: list[float], p: float) -> None:
    assert min(values) <= percentile(values, p) <= max(values)


# -- HTTP/1.1 framing ---------------------------------------------------------------------------


def _stream(raw: bytes, size: int, *, broken: bool = False) -> HttpStream:
    parts = [raw[i : i + size] for i in range(0, len(raw), size)]
    clock = iter(range(1, 10_000))
    state = {"now": 0.0}

    def recv() -> bytes:
        if parts:
            return parts.pop(0)
        if broken:
            raise StreamBroken("lost")
        return b""

    def now() -> float:
        state["now"] = float(next(clock))
        return state["now"]

    return HttpStream(recv, now, 0.0)


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(f"{len(p):x};ext=1\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


@pytest.mark.parametrize("size", [1, 2, 5, 64, 100_000])
def test_chunked_body_in_any_pieces(size: int) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    stream = _stream(raw + _chunked(b"data: a\n\n", b"data: [DONE]\n\n") + b"garbage after the end", size)
    assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
    assert stream.read() == b"data: a\n\ndata: [DONE]\n\n" and stream.error is None
    assert stream.ended_at is not None


def test_content_length_and_close_delimited_bodies() -> None:
    sized = _stream(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 5\r\n\r\nbusy!extra", 3)
    assert sized.status == 400 and sized.read() == b"busy!"
    closed = _stream(b"HTTP/1.0 200 OK\r\n\r\nall of it", 4)
    assert closed.read() == b"all of it" and closed.error is None


def test_broken_and_bad_responses_are_data() -> None:
    cut = _stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 100)
    assert cut.read() == b"ab" and cut.error == "the connection closed before the response ended"
    lost = _stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 100, broken=True)
    assert lost.read() == b"ab" and lost.error == "lost"
    assert _stream(b"", 10).status is None and _stream(b"", 10).error == "the connection closed before a response"
    assert _stream(b"SSH-2.0-OpenSSH\r\n\r\n", 100).error == "bad HTTP response: 'SSH-2.0-OpenSSH'"
    bad_size = _stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 100)
    assert bad_size.read() == b"" and "bad chunk size" in (bad_size.error or "")


def test_request_bytes() -> None:
    raw = request_bytes("POST", "127.0.0.1", 30000, "/generate", b'{"a":1}')
    assert raw.startswith(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1:30000\r\n")
    assert b"Content-Length: 7\r\n" in raw and b"Connection: close" in raw and raw.endswith(b'\r\n\r\n{"a":1}')
