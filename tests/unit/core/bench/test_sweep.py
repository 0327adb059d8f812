"""The pure sweep core: --contexts, exact prompts, skip rules, masking, records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediate.core.bench.latency import RequestMetrics
from remediate.core.bench.record import CSV_COLUMNS, RunArgs, csv_rows, point_record
from remediate.core.bench.sweep import (
    BenchPoint,
    HostBench,
    ServerLimits,
    check_counts,
    generate_body,
    limits_from_info,
    mask_info,
    parse_contexts,
    prompt_ids,
    safe_id_range,
    skip_reason,
)
from remediate.errors import ConfigError


def test_contexts_ints_and_k_suffixes_sorted_and_deduplicated() -> None:
    assert parse_contexts("1k,8k,32k,46k,92k,185k") == (1024, 8192, 32768, 47104, 94208, 189440)
    assert parse_contexts(" 32768, 1400 ,1K,1024") == (1024, 1400, 32768)


@pytest.mark.parametrize("text", ["", "1k,,2k", "1.5k", "-1", "0", "1m", "k", "1 k", "8kb", "0x10", "1e3"])
def test_bad_contexts_name_the_flag(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_contexts(text)
    assert str(info.value).startswith("--contexts: ") and info.value.exit_code == 2


def test_ids_exact_length_in_range_reproducible_and_distinct_first_ids() -> None:
    low, high = safe_id_range(163840)
    assert (low, high) == (1000, 163840 - 1024)
    ids = prompt_ids(4096, seed=7, index=0, id_range=(low, high))
    assert len(ids) == 4096 and all(low <= i < high for i in ids)
    assert ids == prompt_ids(4096, seed=7, index=0, id_range=(low, high))
    firsts = {prompt_ids(3, seed=7, index=i, id_range=(low, high))[0] for i in range(500)}
    assert len(firsts) == 500  # no two requests of a sweep share even one cached token
    assert prompt_ids(1, seed=1, index=0, id_range=(low, high)) != prompt_ids(1, seed=2, index=0, id_range=(low, high))


def test_id_range_without_a_vocabulary_fits_every_tokenizer() -> None:
    low, high = safe_id_range(None)
    assert 0 < low < high <= 32000
    small = safe_id_range(4000)
    assert 0 < small[0] < small[1] <= 4000


@given(st.integers(1, 3000), st.integers(0, 10**6), st.integers(0, 10**4))
def test_ids_always_exact(length: int, seed: int, index: int) -> None:
    ids = prompt_ids(length, seed=seed, index=index, id_range=(1000, 31000))
    assert len(ids) == length and min(ids) >= 1000 and max(ids) < 31000


def test_generate_body_is_greedy_unstopped_streamed() -> None:
    body = generate_body([5, 6], 24)
    assert body == {
        "input_ids": [5, 6],
        "sampling_params": {"max_new_tokens": 24, "ignore_eos": True, "temperature": 0},
        "stream": True,
    }


INFO = {
    "max_total_num_tokens": 195011,
    "max_req_input_len": 195005,
    "context_length": None,
    "api_key": "sk-live-123",
    "hf_token": "hf_abc",
    "tokenizer_path": "moonshotai/Kimi",
    "launch_command": "python -m sglang.launch_server --api-key s3cret --port 1",
    "dist_init_addr": "tcp://user:pw@10.0.0.1:5000",
    "internal_states": [{"admin_api_key": "x", "last_gen_throughput": 1.0}],
}


def test_limits_and_skip_reasons() -> None:
    limits = limits_from_info(INFO, {"vocab_size": 163840})
    assert limits == ServerLimits(195011, 195005, None, 163840)
    assert skip_reason(189440, 24, limits) is None
    pool = skip_reason(195000, 24, limits)
    assert pool is not None and "max_total_num_tokens 195,011" in pool
    too_long = skip_reason(195005, 24, limits)
    assert too_long is not None and "max_req_input_len 195,005" in too_long
    ctx = skip_reason(9000, 24, ServerLimits(context_length=8192))
    assert ctx is not None and "context length 8,192" in ctx
    assert skip_reason(10**6, 24, ServerLimits()) is None  # nothing known: let the server say


def test_limits_from_internal_states_of_old_servers() -> None:
    info = {"internal_states": [{"memory_usage": {"token_capacity": 1234}}]}
    assert limits_from_info(info).max_total_num_tokens == 1234


def test_server_info_secrets_masked() -> None:
    masked = mask_info(INFO)
    text = json.dumps(masked)
    for secret in ("sk-live-123", "hf_abc", "s3cret", ":pw@", '"x"'):
        assert secret not in text
    assert masked["tokenizer_path"] == "moonshotai/Kimi" and masked["max_total_num_tokens"] == 195011
    assert masked["internal_states"][0]["last_gen_throughput"] == 1.0


def _run(prompt: int, cached: int = 0, ttft: float = 0.5, wall: float = 2.3) -> RequestMetrics:
    return RequestMetrics(
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=24,
        ttft_s=ttft,
        itl_s=(0.1,) * 23,
        decode_wall_s=wall,
        e2e_s=ttft + wall,
    )


def test_counts_checked() -> None:
    assert check_counts(1024, _run(1024)) == []
    problems = check_counts(1024, _run(1031, cached=16))
    assert "prompt_tokens 1031 ≠ 1,024 requested" in problems[0] and "cached_tokens 16" in problems[1]


def test_point_medians_and_records() -> None:
    point = BenchPoint(1024, "ok", runs=[_run(1024, ttft=t) for t in (0.4, 0.5, 0.9)])
    doc = point.to_dict()
    assert doc["ttft_s"] == 0.5 and doc["prompt_tokens"] == 1024 and doc["cached_tokens"] == 0
    assert doc["prefill_tok_s"] == round(1024 / 0.5, 1) and doc["decode_tok_s"] == round(23 / 2.3, 2)
    bench = HostBench("gpu-01", "sglang.service", limits=ServerLimits(195011, 195005), server_info=mask_info(INFO))
    bench.points = [point, BenchPoint(200000, "skipped", "too long")]
    record = point_record(bench, point, RunArgs((1024, 200000), 24, runs=3), date="2026-12-01T09:00:00Z", version="0")
    assert record["random_input_len"] == 1024 and record["random_range_ratio"] == 1.0
    assert record["median_ttft_ms"] == 500.0 and record["p99_ttft_ms"] == pytest.approx(
        892.0
    )  # numpy.percentile([400, 500, 900], 99)
    assert record["completed"] == 3 and record["total_output_tokens"] == 72
    assert record["server_info"]["api_key"] == "***"
    assert record["median_itl_ms"] == 100.0
    assert record["backend"] == "sglang"  # a sweep whose unit was not read: the default
    bench.backend = "vllm"  # the unit's engine, as bench_serving's --backend names it
    assert (
        point_record(bench, point, RunArgs((1024,), 24), date="2026-12-01T09:00:00Z", version="0")["backend"] == "vllm"
    )
    json.dumps(record)
    rows = csv_rows([bench])
    assert [tuple(r) for r in rows] == [CSV_COLUMNS, CSV_COLUMNS]
    assert rows[1]["status"] == "skipped" and rows[1]["ttft_s"] is None and rows[1]["note"] == "too long"


def test_the_bench_core_does_no_io() -> None:
    import ast
    from pathlib import Path

    core = Path(__file__).resolve().parents[4] / "src" / "remediate" / "core"
    allowed = {"__future__", "collections.abc", "dataclasses", "hashlib", "json", "math", "re", "typing"}
    for name in ("bench/sweep.py", "bench/stream.py", "bench/latency.py", "bench/record.py"):
        tree = ast.parse((core / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for module in modules:
                    assert module in allowed or module.startswith("remediate."), (name, module)
                    assert not module.startswith("remediate.transport"), (name, module)
