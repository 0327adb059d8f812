"""The sglang stand-in by version: 0.5.23's --config YAML, its split graph flag, its allocator refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .proc import INCIDENT

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


def test_before_0523_neither_refusal_exists(start) -> None:
    srv = start([*INCIDENT, "--weight-cache-mode", "daemon"], {"api_version": "0.5.6"}, env=EXPANDABLE)
    srv.wait_healthy()
