"""PURE: what ``remediate bench`` writes — one JSON line per point (close to sglang ``bench_serving``'s
``--output-file`` records) and CSV rows.

A JSONL record holds, like ``bench_serving``'s: ``backend``, the run arguments (``random_input_len``,
``random_output_len``, ``random_range_ratio`` = 1.0 since every length is exact, ``num_prompts``,
``seed``), ``server_info`` (secrets masked), ``completed``, token totals, ``duration`` and
``{mean,median,p90,p99}_{ttft,itl,e2e_latency}_ms``; plus ours: ``host``, ``unit``, ``requested``,
``prompt_tokens``, ``cached_tokens`` (as the server counted them), ``status`` and ``note``, and the
medians of prefill tok/s, decode tok/s and decode wall seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remediate.core.bench.sweep import BenchPoint, HostBench

CSV_COLUMNS = (
    "host",
    "requested",
    "prompt_tokens",
    "cached_tokens",
    "ttft_s",
    "prefill_tok_s",
    "decode_tok_s",
    "decode_wall_s",
    "e2e_s",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "status",
    "note",
)


@dataclass(frozen=True)
class RunArgs:
    """The sweep's arguments, recorded with every point."""

    contexts: tuple[int, ...]
    gen: int
    runs: int = 1
    warmup: int = 0
    seed: int = 0
    margin: int = 64


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def point_record(bench: HostBench, point: BenchPoint, args: RunArgs, *, date: str, version: str) -> dict[str, Any]:
    """One JSON line for one point of one host."""
    ok_runs = [r for r in point.runs if r.ok]
    record: dict[str, Any] = {
        "tool": "remediate bench",
        "version": version,
        "date": date,
        "backend": bench.backend or "sglang",  # a host that failed before its unit was read: the default
        "host": bench.host,
        "unit": bench.unit,
        "endpoint": bench.endpoint,
        "dataset_name": "random-ids",
        "random_input_len": point.requested,
        "random_output_len": args.gen,
        "random_range_ratio": 1.0,
        "num_prompts": args.runs,
        "warmup_requests": args.warmup,
        "max_concurrency": 1,
        "seed": args.seed,
        "contexts": list(args.contexts),
        "requested": point.requested,
        "status": point.status,
        "note": point.note,
        "completed": len(ok_runs),
        "prompt_tokens": point.prompt_tokens,
        "cached_tokens": point.cached_tokens,
        "total_input_tokens": sum(r.prompt_tokens or 0 for r in ok_runs),
        "total_output_tokens": sum(r.completion_tokens for r in ok_runs),
        "duration": round(sum(r.e2e_s or 0.0 for r in ok_runs), 6),
        "max_total_num_tokens": bench.limits.max_total_num_tokens,
        "max_req_input_len": bench.limits.max_req_input_len,
    }
    for metric in ("ttft", "itl", "e2e_latency"):
        summary = point.summary(metric)
        for stat in ("mean", "median", "p90", "p99"):
            record[f"{stat}_{metric}_ms"] = _ms(getattr(summary, stat))
    record["median_prefill_tok_s"] = _round(point.summary("prefill").median, 1)
    record["median_decode_tok_s"] = _round(point.summary("decode").median, 2)
    record["median_decode_wall_s"] = _round(point.summary("decode_wall").median, 4)
    record["server_info"] = bench.server_info
    return record


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def csv_rows(benches: list[HostBench]) -> list[dict[str, Any]]:
    """One row per point of every host, columns :data:`CSV_COLUMNS`."""
    rows = []
    for bench in benches:
        for point in bench.points:
            doc = point.to_dict()
            ttft = point.summary("ttft")
            rows.append(
                {
                    **{k: doc.get(k) for k in CSV_COLUMNS if k in doc},
                    "host": bench.host,
                    "p90_ttft_ms": _ms(ttft.p90),
                    "p99_ttft_ms": _ms(ttft.p99),
                }
            )
    return [{k: row.get(k) for k in CSV_COLUMNS} for row in rows]
