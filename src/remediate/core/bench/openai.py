"""PURE: vLLM's streamed ``/v1/completions`` (OpenAI's server-sent events) read as the sweep's chunks.

vLLM streams ``data: {json}\\n\\n`` per chunk and ``data: [DONE]\\n\\n`` at the end
(vllm/entrypoints/openai/serving_completion.py ``completion_stream_generator``); each chunk's ``choices[0]``
carries the new ``text`` and, on the last one, ``finish_reason``. With ``stream_options.include_usage`` a last
chunk with empty ``choices`` carries ``usage`` (``prompt_tokens``, ``completion_tokens``, and
``prompt_tokens_details.cached_tokens`` when the server reports it); with ``continuous_usage_stats`` every chunk
carries the usage so far, so each chunk's token count is the server's own. An error mid-stream is a chunk of
its own: ``{"error": {...}}`` (0.11) or ``{"object": "error", "message": ...}`` (older releases).

The SSE framing is :class:`remediate.core.bench.stream.SSEDecoder`'s; :func:`as_generate_chunks` turns each
OpenAI chunk into the shape the latency measurement reads (sglang's ``meta_info`` counts), so TTFT, ITL,
prefill and decode are measured exactly as for sglang (:mod:`remediate.core.bench.latency`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from remediate.core.bench.stream import StreamChunk


def completions_body(ids: Sequence[int], gen: int, model: str | None) -> dict[str, Any]:
    """The ``/v1/completions`` request: a prompt of exact token ids, greedy, no early stop, streamed with the
    usage on every chunk (vllm/entrypoints/openai/protocol.py ``CompletionRequest``: ``ignore_eos`` is vLLM's
    extra sampling parameter; ``prompt`` may be a list of token ids)."""
    body: dict[str, Any] = {
        "prompt": list(ids),
        "max_tokens": gen,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if model:
        body["model"] = model
    return body


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _error(data: dict[str, Any]) -> str | None:
    err = data.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    if err is not None:
        return str(err)
    if data.get("object") == "error":
        return str(data.get("message") or "error")
    return None


def as_generate_chunks(chunks: Iterable[StreamChunk]) -> Iterator[StreamChunk]:
    """Each OpenAI chunk as a chunk of sglang's shape: ``text``, and ``meta_info`` with the prompt, cached and
    completion counts the server reported (the count by chunks where it reports none), the finish reason."""
    count = 0
    for chunk in chunks:
        if chunk.done:
            yield chunk
            continue
        data = chunk.data
        error = _error(data)
        if error is not None:
            yield StreamChunk(chunk.at, {"error": {"message": error}})
            continue
        usage = _object(data.get("usage"))
        details = _object(usage.get("prompt_tokens_details"))
        choices = data.get("choices")
        choice = _object(choices[0]) if isinstance(choices, list) and choices else None
        meta: dict[str, Any] = {}
        for key, value in (
            ("prompt_tokens", usage.get("prompt_tokens")),
            ("cached_tokens", details.get("cached_tokens")),
        ):
            if _count(value) is not None:
                meta[key] = value
        text = ""
        if choice:
            text = str(choice.get("text") or "")
            reported = _count(usage.get("completion_tokens"))
            count = reported if reported is not None else count + (1 if text else 0)
            meta["completion_tokens"] = count
            if choice.get("finish_reason") is not None:
                meta["finish_reason"] = {"type": str(choice["finish_reason"])}
        # the usage-only chunk at the end adds no token: it carries no completion count
        yield StreamChunk(chunk.at, {"text": text, "meta_info": meta})
