"""One host's sweep against a scripted FakeTransport: what is sent, what is measured, when it stops."""

from __future__ import annotations

import json

from remediate.host.bench.bench import BenchOptions, bench_host
from remediate.host.bench.bench_sglang import BUSY_NOTE
from tests.support.fake_transport import FakeTransport, Pieces, state_output
from tests.support.hosts import bench_ready_host

UNIT = "sglang.service"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB"
INFO = {"max_total_num_tokens": 195011, "max_req_input_len": 195005, "api_key": "sk-1"}


def host(active: str = "active", *polls: str) -> FakeTransport:
    journal = f"Prefill batch. #new-seq: 1\n{OOM}\nSIGQUIT received\n"
    t = bench_ready_host(info=INFO, active=active, polls=polls, journal=journal)
    t.http("/model_info", (200, json.dumps({"model_path": "m", "vocab_size": 163840})))
    return t


def sse(prompt: int, gen: int, *, cached: int = 0, ttft: float = 0.5, itl: float = 0.1) -> Pieces:
    pieces = []
    for i in range(1, gen + 1):
        meta = {"prompt_tokens": prompt, "completion_tokens": i, "cached_tokens": cached}
        meta["finish_reason"] = {"type": "length", "length": gen} if i == gen else None  # type: ignore[assignment]
        data = json.dumps({"text": "w" * i, "meta_info": meta}).encode()
        pieces.append((ttft + (i - 1) * itl, b"data: " + data + b"\n\n"))
    return [*pieces, (pieces[-1][0] + 0.001, b"data: [DONE]\n\n")]


def answer(body: bytes) -> Pieces:
    req = json.loads(body)
    n = len(req["input_ids"])
    return sse(n, req["sampling_params"]["max_new_tokens"], ttft=n / 10_000, itl=n / 1_000_000)


def test_exact_prompts_flushed_first_medians_and_skips() -> None:
    t = host().stream("/generate", answer)
    bench = bench_host(t, BenchOptions(contexts=(1024, 8192, 195000), gen=4, runs=3, warmup=1, seed=5))
    assert bench.ok and bench.unit == UNIT and bench.endpoint == "127.0.0.1:30000", bench.to_dict()
    posts = [c for c in t.http_calls if c.method == "POST"]
    assert [c.path for c in posts] == ["/flush_cache", "/generate"] * 8  # 2 lengths × (1 warm-up + 3 runs)
    bodies = [json.loads(c.body) for c in posts if c.path == "/generate"]
    assert [len(b["input_ids"]) for b in bodies] == [1024] * 4 + [8192] * 4
    assert len({b["input_ids"][0] for b in bodies}) == 8
    assert all(1000 <= i < 163840 - 1024 for b in bodies for i in b["input_ids"])
    assert bodies[0]["sampling_params"] == {"max_new_tokens": 4, "ignore_eos": True, "temperature": 0}
    assert all(b["stream"] is True for b in bodies)
    one, eight, skipped = bench.points
    assert len(one.runs) == 3 and one.status == "ok" and one.note == ""
    doc = one.to_dict()
    assert doc["ttft_s"] == 0.1024 and doc["prompt_tokens"] == 1024 and doc["cached_tokens"] == 0
    assert doc["decode_tok_s"] == round(3 / (3 * 0.001024), 2)
    assert skipped.status == "skipped" and "KV pool" in skipped.note and not skipped.runs
    assert bench.server_info["api_key"] == "***"
    assert bench.to_dict()["max_total_num_tokens"] == 195011


def test_busy_server_skips_the_point_and_goes_on() -> None:
    t = host().stream("/generate", answer)
    t.http("/flush_cache", (400, "Please check backend logs"), (200, "Cache flushed.\n"))
    bench = bench_host(t, BenchOptions(contexts=(1024, 2048), gen=2))
    assert [(p.status, p.note) for p in bench.points] == [("skipped", BUSY_NOTE), ("ok", "")]
    assert bench.ok


def test_counts_that_are_not_exact_are_said() -> None:
    t = host().stream("/generate", lambda body: sse(1030, 2, cached=512))
    bench = bench_host(t, BenchOptions(contexts=(1024,), gen=2))
    (point,) = bench.points
    assert point.status == "ok"
    assert "prompt_tokens 1030 ≠ 1,024 requested" in point.note and "cached_tokens 512" in point.note


def test_a_rejected_request_stops_the_sweep_server_alive() -> None:
    t = host().stream("/generate", answer, 400)
    t.http("/generate", (400, json.dumps({"error": {"message": "too long"}})))
    bench = bench_host(t, BenchOptions(contexts=(1024, 2048, 4096), gen=2))
    assert [p.status for p in bench.points] == ["ok", "failed"]
    assert bench.exit_code == 1 and bench.error is not None and "the sweep stops here" in bench.error
    assert "diagnose" not in bench.error


def test_a_dead_server_is_named_with_its_journal_and_diagnose() -> None:
    dead = state_output("activating", "auto-restart", result="signal", main_pid=0)
    t = host("active", dead).stream("/generate", answer, lambda body: sse(32768, 8)[:2])  # dropped mid-stream
    bench = bench_host(t, BenchOptions(contexts=(1024, 32768, 65536), gen=8), label="gpu-01")
    assert [p.status for p in bench.points] == ["ok", "failed"]
    assert bench.error is not None and "the server died at 32,768 tokens" in bench.error
    assert "auto-restart" in bench.error and "run `remediate diagnose gpu-01`" in bench.error
    assert bench.journal[0] == OOM
    assert "before [DONE]" in bench.points[1].note


def test_a_stopped_unit_is_not_benchmarked() -> None:
    t = host(active="failed")
    bench = bench_host(t, BenchOptions(contexts=(1024,)))
    assert bench.points == [] and bench.error is not None and "is failed" in bench.error
    assert not [c for c in t.http_calls if c.method == "POST"]
