"""vLLM's OpenAI stream (``/v1/completions``) read as the sweep's chunks, and measured like sglang's."""

from __future__ import annotations

import json

from remediate.core.bench.latency import measure_request
from remediate.core.bench.openai import as_generate_chunks, completions_body
from remediate.core.bench.stream import decode_stream

HEAD = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}


def event(data: object) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def chunk(text: str, finish: str | None = None, usage: dict | None = None) -> bytes:
    body = {**HEAD, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    return event({**body, "usage": usage} if usage else body)


def usage(prompt: int, completion: int, cached: int | None = None) -> dict:
    out: dict = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def measure(pieces: list[tuple[float, bytes]]):
    return measure_request(0.0, list(as_generate_chunks(decode_stream(pieces))))


def test_the_body_sends_exact_ids_and_asks_for_the_usage_on_every_chunk() -> None:
    body = completions_body([5, 6, 7], 4, "m")
    assert body["prompt"] == [5, 6, 7] and body["max_tokens"] == 4 and body["ignore_eos"] and body["stream"]
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["model"] == "m" and "model" not in completions_body([1], 1, None)


def test_continuous_usage_gives_the_servers_counts_and_the_timings() -> None:
    pieces = [
        (2.0, chunk(" a", usage=usage(1000, 1))),
        (2.5, chunk(" b c", usage=usage(1000, 3))),  # two tokens in one chunk: the gap is spread
        (3.0, chunk(" d", "length", usage(1000, 4))),
        (3.0, event({**HEAD, "choices": [], "usage": usage(1000, 4, cached=0)})),
        (3.1, b"data: [DONE]\n\n"),
    ]
    got = measure(pieces)
    assert got.ok and (got.prompt_tokens, got.cached_tokens, got.completion_tokens) == (1000, 0, 4)
    assert got.ttft_s == 2.0 and got.itl_s == (0.25, 0.25, 0.5) and got.decode_wall_s == 1.0
    assert got.prefill_tok_s == 500.0 and got.decode_tok_s == 3.0 and got.finish == "length"


def test_without_continuous_usage_chunks_are_counted_and_the_last_chunk_adds_no_token() -> None:
    last = event({**HEAD, "choices": [], "usage": usage(64, 3, cached=32)})
    pieces = [
        (1.0, chunk(" a")),
        (1.5, chunk("")),
        (2.0, chunk(" b", "length")),
        (2.0, last),
        (2.0, b"data: [DONE]\n\n"),
    ]
    got = measure(pieces)
    assert got.ok and (got.prompt_tokens, got.cached_tokens, got.completion_tokens) == (64, 32, 2)
    assert got.ttft_s == 1.0 and got.itl_s == (1.0,)


def test_an_error_chunk_in_either_format_is_the_requests_error() -> None:
    new = measure([(1.0, event({"error": {"message": "boom", "code": 500}})), (1.0, b"data: [DONE]\n\n")])
    old = measure([(1.0, event({"object": "error", "message": "old boom"})), (1.0, b"data: [DONE]\n\n")])
    assert (new.error, old.error) == ("boom", "old boom")


def test_a_stream_cut_before_done_or_without_a_token_is_an_error() -> None:
    assert measure([(1.0, chunk(" a", usage=usage(8, 1)))]).error == (
        "the stream ended before [DONE] (the connection closed)"
    )
    assert measure([(1.0, b"data: [DONE]\n\n")]).error == "the stream ended without a token"
    odd = measure([(1.0, event({**HEAD, "choices": "x", "usage": []})), (1.0, b"data: [DONE]\n\n")])
    assert odd.error == "the stream ended without a token"
