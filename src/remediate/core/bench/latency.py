"""PURE: per-request latency metrics of a streamed ``/generate``, measured like sglang's own benchmark.

(sglang benchmark/serving.py ``calculate_metrics``; the stream of entrypoints/http_server.py
``generate_request``.) TTFT = send → the first chunk that carries a token; ITL = the gap between chunks
divided by the rise in ``completion_tokens`` (a multi-token chunk is spread evenly, like ``bench_serving``);
decode wall = first token → last token; decode tok/s = (completion − 1) / decode wall; prefill tok/s = (prompt
− cached) / TTFT; E2E = send → the end of the stream. Percentiles interpolate linearly between order
statistics (numpy's default, which ``bench_serving`` uses).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from remediate.core.bench.stream import StreamChunk


@dataclass(frozen=True)
class RequestMetrics:
    """What one streamed request measured (times in seconds); ``error`` when it did not complete."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int = 0
    ttft_s: float | None = None
    itl_s: tuple[float, ...] = ()
    decode_wall_s: float | None = None
    e2e_s: float | None = None
    server_e2e_s: float | None = None
    finish: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def prefill_tok_s(self) -> float | None:
        if self.prompt_tokens is None or not self.ttft_s:
            return None
        return (self.prompt_tokens - (self.cached_tokens or 0)) / self.ttft_s

    @property
    def decode_tok_s(self) -> float | None:
        if self.completion_tokens < 2 or not self.decode_wall_s:
            return None
        return (self.completion_tokens - 1) / self.decode_wall_s


def measure_request(sent_at: float, chunks: Sequence[StreamChunk], *, ended_at: float | None = None) -> RequestMetrics:
    """The metrics of one request from its stream's events (each with its arrival time)."""
    prompt: int | None = None
    cached: int | None = None
    server_e2e: float | None = None
    finish: str | None = None
    first_at: float | None = None
    last_at: float | None = None
    count = 0
    itl: list[float] = []
    done = False
    error: str | None = None
    for chunk in chunks:
        if chunk.done:
            done = True
            break
        if chunk.error is not None:
            error = chunk.error
            break
        prompt = chunk.prompt_tokens if chunk.prompt_tokens is not None else prompt
        cached = chunk.cached_tokens if chunk.cached_tokens is not None else cached
        server_e2e = chunk.server_e2e_latency if chunk.server_e2e_latency is not None else server_e2e
        if chunk.finish_reason is not None:
            finish = str(chunk.finish_reason.get("type"))
        if not chunk.has_token:
            continue
        reported = chunk.completion_tokens
        new_count = reported if reported is not None else count + 1
        if new_count <= count:
            continue  # a chunk without new tokens (e.g. the finish reason alone)
        if first_at is None:
            first_at = chunk.at
        else:
            assert last_at is not None
            gap = (chunk.at - last_at) / (new_count - count)
            itl.extend([gap] * (new_count - count))
        last_at = chunk.at
        count = new_count
    end = ended_at if ended_at is not None else (chunks[-1].at if chunks else None)
    if error is None and first_at is None:
        error = "the stream ended without a token"
    elif error is None and not done and finish is None:
        error = "the stream ended before [DONE] (the connection closed)"
    return RequestMetrics(
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=count,
        ttft_s=None if first_at is None else first_at - sent_at,
        itl_s=tuple(itl),
        decode_wall_s=None if first_at is None or last_at is None else last_at - first_at,
        e2e_s=None if end is None else end - sent_at,
        server_e2e_s=server_e2e,
        finish=finish,
        error=error,
    )


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0–100), linear between order statistics; ``values`` must not be empty."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Summary:
    """mean, median, p90, p99 of some measurements (all None when there are none)."""

    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    p99: float | None = None


def summarize(values: Sequence[float | None]) -> Summary:
    present = [v for v in values if v is not None]
    if not present:
        return Summary()
    return Summary(
        mean=sum(present) / len(present),
        median=percentile(present, 50),
        p90=percentile(present, 90),
        p99=percentile(present, 99),
    )
