"""One vLLM host's sweep against a scripted FakeTransport: /v1/completions with exact ids, the reset, the checks."""

from __future__ import annotations

import json

import pytest

from remediate.core.engines import VLLM
from remediate.errors import RemediationError
from remediate.host.bench.bench import BenchOptions, bench_host, probe_prefill
from remediate.host.bench.bench_vllm import NO_RESET_NOTE
from tests.support.fake_transport import FakeTransport, Pieces, state_output
from tests.support.hosts import incident_host

ARGV = ("/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.92", "--host", "127.0.0.1", "--port", "8001")
MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 40960}]}
METRICS = 'vllm:cache_config_info{block_size="16",gpu_memory_utilization="0.92",num_gpu_blocks="3600"} 1.0\n'


def host() -> FakeTransport:
    t = incident_host(text=None, active="active", argv=ARGV, unit="vllm.service", journal="")
    t.on(r"\Asystemctl show", state_output())
    t.http("/v1/models", (200, json.dumps(MODELS)))
    t.http("/metrics", (200, METRICS))
    t.http("/reset_prefix_cache", (200, ""))
    t.http("/health", 200)
    return t


def answer(body: bytes, *, counted: int | None = None) -> Pieces:
    req = json.loads(body)
    prompt, gen = len(req["prompt"]), req["max_tokens"]
    head = {"id": "c", "object": "text_completion", "created": 1, "model": "m"}
    pieces = []
    for i in range(1, gen + 1):
        choice = {"index": 0, "text": " w", "finish_reason": "length" if i == gen else None}
        use = {"prompt_tokens": counted or prompt, "completion_tokens": i, "total_tokens": prompt + i}
        pieces.append(
            (
                prompt / 10_000 + (i - 1) * 0.01,
                f"data: {json.dumps({**head, 'choices': [choice], 'usage': use})}\n\n".encode(),
            )
        )
    last = {**head, "choices": [], "usage": {"prompt_tokens": counted or prompt, "completion_tokens": gen}}
    return [*pieces, (pieces[-1][0], f"data: {json.dumps(last)}\n\n".encode()), (pieces[-1][0], b"data: [DONE]\n\n")]


def test_exact_token_ids_through_v1_completions_reset_first() -> None:
    t = host().stream("/v1/completions", answer)
    bench = bench_host(t, BenchOptions(contexts=(1024, 8192, 40960), gen=4, runs=2))
    assert bench.ok and bench.endpoint == "127.0.0.1:8001", bench.to_dict()
    assert bench.backend == "vllm"  # its records say so (bench_serving's --backend)
    posts = [c for c in t.http_calls if c.method == "POST"]
    assert [c.path for c in posts] == ["/reset_prefix_cache", "/v1/completions"] * 4
    bodies = [json.loads(c.body) for c in posts if c.path == "/v1/completions"]
    assert [len(b["prompt"]) for b in bodies] == [1024, 1024, 8192, 8192] and len({b["prompt"][0] for b in bodies}) == 4
    assert (
        bodies[0]["model"] == "m" and bodies[0]["ignore_eos"] and bodies[0]["stream_options"]["continuous_usage_stats"]
    )
    one, eight, skipped = bench.points
    assert (one.status, one.note, one.prompt_tokens, len(one.runs)) == ("ok", "", 1024, 2)
    assert one.to_dict()["ttft_s"] == 0.1024 and one.to_dict()["decode_tok_s"] == 100.0
    assert skipped.status == "skipped" and "context length 40,960" in skipped.note
    assert bench.to_dict()["max_total_num_tokens"] == 57600 and bench.server_info["engine"] == "vllm"


def test_no_reset_is_said_and_a_wrong_count_too() -> None:
    t = host().stream("/v1/completions", lambda body: answer(body, counted=1030))
    t.http("/reset_prefix_cache", (404, '{"detail":"Not Found"}'))
    bench = bench_host(t, BenchOptions(contexts=(1024,), gen=2))
    (point,) = bench.points
    assert point.status == "ok" and NO_RESET_NOTE in point.note and "prompt_tokens 1030 ≠ 1,024 requested" in point.note


def test_a_400_stops_the_sweep_and_an_error_chunk_is_the_requests_error() -> None:
    t = host().stream("/v1/completions", 400)
    bench = bench_host(t, BenchOptions(contexts=(1024, 2048), gen=2))
    assert not bench.ok and [p.status for p in bench.points] == ["failed"]
    assert bench.points[0].note.startswith("/v1/completions answered 400")
    error = json.dumps({"error": {"message": "EngineCore encountered an issue.", "code": 500}})
    t = host().stream("/v1/completions", [(0.5, f"data: {error}\n\n".encode()), (0.5, b"data: [DONE]\n\n")])
    bench = bench_host(t, BenchOptions(contexts=(1024,), gen=2, death_wait=0))
    assert bench.points[0].status == "failed" and "EngineCore encountered an issue." in bench.points[0].note


def test_the_oom_probe_is_one_prefill_through_v1_completions() -> None:
    t = host().stream("/v1/completions", answer)
    t.on(r"\Adate \+%s", "1764400100\n")
    summary = probe_prefill(t, "vllm.service", ("127.0.0.1", 8001), 32000, info=None, engine=VLLM)
    assert summary.ok is True and summary.prompt_tokens == 32000, summary
    posts = [c for c in t.http_calls if c.method == "POST"]
    assert [c.path for c in posts] == ["/reset_prefix_cache", "/v1/completions"]
    body = json.loads(posts[1].body)
    assert len(body["prompt"]) == 32000 and body["max_tokens"] == 1 and body["model"] == "m"
    with pytest.raises(RemediationError, match="cannot take it"):  # 40960 + 1 generated > max_model_len
        probe_prefill(t, "vllm.service", ("127.0.0.1", 8001), 40960, info=None, engine=VLLM)
