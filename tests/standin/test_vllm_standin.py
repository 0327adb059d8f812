"""The vLLM stand-in (sandbox/standin/vllm) as a local process: its lines, sizing, failures and endpoints.

Its output is also read by remediate's pure vLLM readers (core.engines.vllm): the golden texts the stand-in prints.
"""

from __future__ import annotations

import json

from remediate.core.engines.vllm import failures as f
from remediate.core.engines.vllm.failures import diagnose_vllm
from remediate.core.engines.vllm.sizing import VllmSizing
from remediate.core.engines.vllm.startup import parse_vllm_startup

CLI = "vllm.entrypoints.cli.main"
INCIDENT = ["serve", "standin/mha-13b-40k", "--gpu-memory-utilization", "0.95", "--max-num-batched-tokens", "16384"]
FIX = ["serve", "standin/mha-13b-40k", "--gpu_memory_utilization=0.94", "--max-num-batched-tokens", "4096"]
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def _complete(srv, tokens: int) -> tuple[int, dict]:
    code, body = srv.post("/v1/completions", {"model": "m", "prompt": [7] * tokens, "max_tokens": 8})
    return code, json.loads(body or b"{}")


def test_the_32k_incident_kills_the_engine(start) -> None:
    srv = start(INCIDENT, module=CLI)
    srv.wait_healthy()
    code, body = _complete(srv, 16000)
    assert code == 200 and body["usage"]["prompt_tokens"] == 16000
    assert _complete(srv, 32000)[0] == 500
    assert srv.get("/health")[0] == 503
    assert srv.wait_exit() == 1
    out = srv.output()
    started = parse_vllm_startup(out.splitlines())
    assert (started.available_kv_gib, started.kv_tokens, started.max_model_len) == (46.33, 60720, 40960)
    cause = diagnose_vllm(out.splitlines()).cause
    assert cause is not None and cause.kind == f.RUNTIME_OOM and cause.numbers["tried_gib"] == 2.79


def test_the_fix_serves_the_32k_prompt(start) -> None:
    srv = start(FIX, env=EXPANDABLE, module=CLI)
    srv.wait_healthy()
    code, body = _complete(srv, 32000)
    assert code == 200 and body["usage"]["prompt_tokens"] == 32000
    started = parse_vllm_startup(srv.output().splitlines())
    assert (started.available_kv_gib, started.kv_tokens) == (48.54, 63616)
    status, models = srv.get("/v1/models")
    assert status == 200 and json.loads(models)["data"][0]["max_model_len"] == 40960
    metrics = srv.get("/metrics")[1].decode()
    assert 'num_gpu_blocks="3976"' in metrics and 'block_size="16"' in metrics
    assert "vllm:num_requests_running{" in metrics and "vllm:kv_cache_usage_perc{" in metrics
    assert srv.post("/reset_prefix_cache", {})[0] == 404  # only with VLLM_SERVER_DEV_MODE=1
    assert _complete(srv, 40960)[0] == 400  # beyond max_model_len: vLLM's 400
    request = {"prompt": [7] * 100, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    code, raw = srv.post("/v1/completions", request)
    events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert code == 200 and events[-1] == "[DONE]" and len(events) == 5
    assert json.loads(events[-2])["usage"]["prompt_tokens"] == 100 and json.loads(events[-2])["choices"] == []


def test_half_utilization_dies_at_startup(start) -> None:
    srv = start(["--model", "standin/mha-13b-40k", "--gpu-memory-utilization", "0.50"],
                module="vllm.entrypoints.openai.api_server")  # fmt: skip
    assert srv.wait_exit() == 1
    got = diagnose_vllm(srv.output().splitlines())
    assert got.cause is not None and got.cause.kind == f.MAX_MODEL_LEN
    assert got.cause.numbers == {"max_model_len": 40960, "needed_gib": 31.25, "available_gib": 12.69,
                                 "estimated_max_len": 16624}  # fmt: skip
    assert [x.kind for x in got.failures] == [f.MAX_MODEL_LEN, f.INIT_FAILED]


def test_the_sizing_model_predicts_the_stand_ins_lowest_utilization(start) -> None:
    sizing = VllmSizing(79.19, 0.94, 48.54, 63616)
    lowest = sizing.lowest_utilization(40960)
    assert lowest == 0.73
    fits = start([*FIX[:2], "--gpu-memory-utilization", str(lowest), "--max-num-batched-tokens", "4096"], module=CLI)
    short = start([*FIX[:2], "--gpu-memory-utilization", "0.72", "--max-num-batched-tokens", "4096"], module=CLI)
    fits.wait_healthy()
    assert parse_vllm_startup(fits.output().splitlines()).kv_tokens == sizing.tokens_at(lowest)
    assert short.wait_exit() == 1 and diagnose_vllm(short.output().splitlines()).cause.kind == f.MAX_MODEL_LEN


def test_another_process_on_the_gpu_and_no_cache_memory(start) -> None:
    busy = start(INCIDENT, {"neighbour": {"pid": 4242, "gib": 6.0}}, module=CLI)
    assert busy.wait_exit() == 1
    cause = diagnose_vllm(busy.output().splitlines()).cause
    assert cause is not None and cause.kind == f.OTHER_PROCESS
    assert cause.numbers == {"free_gib": 72.38, "total_gib": 79.19, "utilization": 0.95, "requested_gib": 75.23}
    empty = start([*INCIDENT[:2], "--gpu-memory-utilization", "0.3"], module=CLI)
    assert empty.wait_exit() == 1
    assert diagnose_vllm(empty.output().splitlines()).cause.kind == f.NO_CACHE_MEMORY


def test_serve_refuses_the_model_option_and_reads_a_config_file(start, tmp_path) -> None:
    refused = start(["serve", "--model", "x"], module=CLI)
    assert refused.wait_exit() != 0 and "positional argument" in refused.output()
    config = tmp_path / "vllm.yaml"
    config.write_text("gpu_memory_utilization: 0.94\nmax-num-batched-tokens: 4096\nmax_model_len: 8192\n")
    srv = start(["serve", "m", "--config", str(config), "--max-model-len", "40960"], module=CLI)
    srv.wait_healthy()
    started = parse_vllm_startup(srv.output().splitlines())
    assert (started.kv_tokens, started.max_model_len) == (63616, 40960)  # the command line wins over the file


def test_the_stream_carries_the_usage_on_every_chunk_and_dev_mode_resets_the_cache(start) -> None:
    from remediate.core.bench.latency import measure_request
    from remediate.core.bench.openai import as_generate_chunks, completions_body
    from remediate.core.bench.stream import decode_stream

    srv = start(FIX, env={**EXPANDABLE, "VLLM_SERVER_DEV_MODE": "1"}, module=CLI)
    srv.wait_healthy()
    assert srv.post("/reset_prefix_cache", {})[0] == 200
    code, raw = srv.post("/v1/completions", completions_body(list(range(1000, 1000 + 2048)), 5, "standin/mha-13b-40k"))
    events = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")]
    assert code == 200 and [e["usage"]["completion_tokens"] for e in events] == [1, 2, 3, 4, 5, 5]
    assert all(e["usage"]["prompt_tokens"] == 2048 for e in events) and events[-1]["choices"] == []
    metrics = measure_request(0.0, list(as_generate_chunks(decode_stream([(1.0, raw)]))))
    assert metrics.ok and (metrics.prompt_tokens, metrics.completion_tokens, metrics.finish) == (2048, 5, "length")


def test_the_sampler_warm_up_runs_out_of_memory_with_too_many_sequences(start) -> None:
    srv = start([*FIX[:2], "--gpu-memory-utilization", "0.94", "--max-num-seqs", "65536"], module=CLI)
    assert srv.wait_exit() == 1
    out = srv.output()
    assert "CUDA out of memory occurred when warming up sampler with 65536 dummy requests. Please try lowering " \
           "`max_num_seqs` or `gpu_memory_utilization` when initializing the engine." in out  # fmt: skip
    assert "Available KV cache memory" not in out  # the profile run died before the pool was sized
    got = diagnose_vllm(out.splitlines())
    assert got.cause is not None and got.cause.kind == f.SAMPLER_OOM and got.cause.numbers == {"num_seqs": 65536}
    assert [x.kind for x in got.failures] == [f.SAMPLER_OOM, f.INIT_FAILED]
    fits = start([*FIX[:2], "--gpu-memory-utilization", "0.94", "--max-num-seqs", "1024"], module=CLI)
    fits.wait_healthy()


def test_metrics_give_the_pool_where_the_capacity_line_never_reached_the_journal(start) -> None:
    """vllm/v1/metrics/loggers.py log_metrics_info: num_gpu_blocks x block_size on /metrics is the pool the
    "GPU KV cache size" line would have said."""
    from remediate.core.engines.vllm.engine import vllm_metrics_info

    logged = start(FIX, module=CLI)
    silent = start(FIX, {"capacity_line": False}, module=CLI)
    logged.wait_healthy()
    silent.wait_healthy()
    assert parse_vllm_startup(silent.output().splitlines()).kv_tokens is None
    tokens = parse_vllm_startup(logged.output().splitlines()).kv_tokens
    reported = vllm_metrics_info(silent.get("/metrics")[1].decode())
    assert tokens and reported == {"max_total_num_tokens": tokens, "gpu_memory_utilization": 0.94}


def test_a_unit_without_a_utilization_runs_at_its_releases_default(start) -> None:
    """CacheConfig.gpu_memory_utilization: 0.9 up to 0.19, 0.92 from 0.20 (and 0.34's resolved default without
    the extensible KV cache): the pool and /metrics follow the release, as plan's default_utilization_at reads it."""
    from remediate.core.engines.vllm.defaults import default_utilization_at
    from remediate.core.engines.vllm.engine import vllm_metrics_info

    pools = {}
    for version in ("0.11.0", "0.20.0", "0.34.0"):
        srv = start(FIX[:2], {"vllm_version": version}, module=CLI)
        srv.wait_healthy()
        info = vllm_metrics_info(srv.get("/metrics")[1].decode())
        release = tuple(int(x) for x in version.split("."))
        assert info["gpu_memory_utilization"] == default_utilization_at(release), version
        pools[version] = parse_vllm_startup(srv.output().splitlines()).kv_tokens
    assert pools["0.11.0"] < pools["0.20.0"] == pools["0.34.0"]
