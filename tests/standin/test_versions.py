"""The sglang stand-in by version: 0.5.23's --config YAML, its split graph flag, its allocator refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from remediate.core.diagnosis.parser import parse_journal
from remediate.core.engines.vllm.startup import parse_vllm_startup
from tests.support.standin_proc import FIX, INCIDENT

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandbox" / "standin"))

from vllm import memory  # noqa: E402  (the stand-in's sizing)

pytestmark = pytest.mark.integration

V23 = {"api_version": "0.5.23"}
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_0523_reads_its_fraction_from_the_config_yaml_and_the_command_line_wins(start, tmp_path: Path) -> None:
    cfg = tmp_path / "k26.yaml"
    cfg.write_text(
        "model-path: moonshotai/Kimi-K2.6\ntp-size: 8\nmem-fraction-static: 0.93\nchunked-prefill-size: 8192\n"
    )
    srv = start(["--config", str(cfg), "--chunked-prefill-size", "4096"], V23)
    srv.wait_healthy()
    info = json.loads(srv.get("/server_info")[1])
    assert (info["mem_fraction_static"], info["chunked_prefill_size"]) == (0.93, 4096)
    assert info["max_total_num_tokens"] == 195011


def test_0523_refuses_the_old_graph_flag_as_argparse_does(start) -> None:
    srv = start([*INCIDENT, "--cuda-graph-max-bs", "64"], V23)
    assert srv.wait_exit() == 2
    assert (
        "error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill" in srv.output()
    )
    assert "invalid_server_argument" in {f.kind for f in parse_journal(srv.output().splitlines()).findings}


def test_0523_mooncake_over_efa_refuses_expandable_segments(start) -> None:
    prefill = [*INCIDENT, "--disaggregation-mode", "prefill"]
    srv = start(prefill, V23, env={**EXPANDABLE, "MOONCAKE_PROTOCOL": "efa"})
    assert srv.wait_exit() == 1
    out = srv.output()
    assert (
        "ValueError: PYTORCH_CUDA_ALLOC_CONF enables expandable_segments, which is incompatible with "
        "MOONCAKE_PROTOCOL=efa because the current libfabric EFA provider cannot transfer CUDA VMM allocations. "
        "Disable expandable_segments." in out
    )
    assert "srt/disaggregation/mooncake/utils.py" in out
    kinds = {f.kind for f in parse_journal(out.splitlines()).findings}  # remediate's reader knows the text
    assert "expandable_segments_refused" in kinds, kinds
    without = start(
        prefill, V23, env={"MOONCAKE_PROTOCOL": "efa", "PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6"}
    )
    without.wait_healthy()


def test_0523_weight_cache_daemon_refuses_expandable_segments(start) -> None:
    srv = start([*INCIDENT, "--weight-cache-mode", "daemon"], V23, env=EXPANDABLE)
    assert srv.wait_exit() == 1
    assert "RuntimeError: [WeightCacheDaemon] PYTORCH_CUDA_ALLOC_CONF sets expandable_segments:True, which is " in (
        srv.output()
    )
    assert "expandable_segments_refused" in {f.kind for f in parse_journal(srv.output().splitlines()).findings}


def test_before_0523_neither_refusal_exists(start) -> None:
    srv = start([*INCIDENT, "--weight-cache-mode", "daemon"], {"api_version": "0.5.6"}, env=EXPANDABLE)
    srv.wait_healthy()


VLLM_CLI = "vllm.entrypoints.cli.main"


@pytest.mark.parametrize(("version", "refused"), [("0.8.5", True), ("0.11.0", True), ("0.34.0", False)])
def test_vllm_serve_with_the_model_option_by_version(start, version: str, refused: bool) -> None:
    srv = start(["serve", "--model", "standin/mha-13b-40k"], {"vllm_version": version}, module=VLLM_CLI)
    if refused:  # FlexibleArgumentParser.parse_args: a ValueError in 0.8.5 (vllm/utils.py) and 0.11
        assert srv.wait_exit() == 1
        assert "ValueError: With `vllm serve`, you should provide the model as a positional argument" in srv.output()
        return
    srv.wait_healthy()  # 0.34 (vllm/utils/argparse_utils.py): a warning, the model moved to the front
    out = srv.output()
    assert "The `--model` option will be removed in a future version." in out
    assert f"█  version {version}" in out  # 0.34: log_version_and_model's logo (entrypoints/common/startup.py)


def test_vllm_reads_only_the_exact_config_word(start, tmp_path: Path) -> None:
    cfg = tmp_path / "v.yaml"
    cfg.write_text("gpu_memory_utilization: 0.93\n")
    model = ["serve", "standin/mha-13b-40k", "--max-num-batched-tokens", "4096"]
    read = start([*model, "--config", str(cfg)], {"vllm_version": "0.34.0"}, module=VLLM_CLI)
    unread = start([*model, f"--config={cfg}"], {"vllm_version": "0.34.0"}, module=VLLM_CLI)
    read.wait_healthy()
    unread.wait_healthy()
    tokens = {u: memory.size(memory.Profile(), u, 4096).tokens for u in (0.93, 0.92)}
    assert parse_vllm_startup(read.output().splitlines()).kv_tokens == tokens[0.93]
    # --config=FILE: never read, so 0.34's own default (0.92) runs
    assert parse_vllm_startup(unread.output().splitlines()).kv_tokens == tokens[0.92]


def test_0523_on_rocm_scales_the_explicit_fraction_unless_honoured(start) -> None:
    """sglang 0.5.23 arg_groups/attention_hook.py: aiter (ROCm's default backend) and a context over 8192 (Kimi:
    262144) turn 0.95 into 0.95 * 0.85 (Kimi's floor is 0.791: 0.93 would not start); SGLANG_AITER_HONOR_EXPLICIT_
    MEM_FRACTION=1 keeps 0.95; 0.5.6 has no factor."""
    from remediate.core.startup import parse_startup

    args = [*INCIDENT[:-1], "0.95"]
    rocm = start(args, {**V23, "platform": "rocm"})
    honoured = start(args, {**V23, "platform": "rocm"}, env={"SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION": "1"})
    older = start(args, {"api_version": "0.5.6", "platform": "rocm"})
    for srv in (rocm, honoured, older):
        srv.wait_healthy()
    info = json.loads(rocm.get("/server_info")[1])
    assert info["attention_backend"] == "aiter" and info["mem_fraction_static"] == pytest.approx(0.8075)
    assert parse_startup(rocm.output().splitlines()).server_args["attention_backend"] == "aiter"
    assert json.loads(honoured.get("/server_info")[1])["mem_fraction_static"] == 0.95
    assert json.loads(older.get("/server_info")[1])["mem_fraction_static"] == 0.95


def test_0523_post_capture_sizing_logs_the_upper_bound_then_the_pool_it_reports(start) -> None:
    """sglang 0.5.23 kv_pool_runtime.py compute_post_capture_kv_resize: "KV Cache VA upper bound", then the pool
    after the graphs; /server_info reports that pool."""
    from remediate.core.engines.sglang.resolved import logged_pool
    from remediate.core.startup import parse_startup

    srv = start(FIX, V23, env={"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"})
    srv.wait_healthy()
    startup = parse_startup(srv.output().splitlines())
    tokens = json.loads(srv.get("/server_info")[1])["max_total_num_tokens"]
    assert "KV Cache VA upper bound." in srv.output() and not startup.is_kv_pool
    assert startup.post_capture_tokens == tokens < (startup.kv_tokens or 0)
    assert logged_pool(startup.post_capture_tokens, startup.kv_tokens, startup.is_kv_pool) == tokens
