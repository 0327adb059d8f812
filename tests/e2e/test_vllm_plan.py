"""`remediate plan`, `oom --auto` and `bench` on a vLLM unit (the vLLM stand-in on a sandbox host): the pool
predicted at another utilization against what the stand-in then reports, the max_model_len floor that `oom --auto`
holds while it fixes the 32k crash, and the sweep through /v1/completions with exact token-id prompts."""

from __future__ import annotations

from typing import Any

import pytest

from remediate.core.engines.vllm.startup import parse_vllm_startup
from tests.support.node import Node, poll

pytestmark = pytest.mark.e2e

UNIT = "vllm.service"
# Longer than the model's own 40960 (hence VLLM_ALLOW_LONG_MAX_MODEL_LEN): one request then needs 43.75 GiB of
# KV, so the floor (0.92) is above what the headroom alone would choose after the 32k crash (0.90).
LONG = 57344


def vllm_unit(node: Node, utilization: float, *, max_model_len: int = LONG, dev_mode: bool = False) -> str:
    env = "Environment=VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" + (" VLLM_SERVER_DEV_MODE=1" if dev_mode else "")
    return (
        "[Unit]\nDescription=vLLM\n[Service]\n"
        f"{env}\n"
        "ExecStart=/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model standin/mha-13b-40k "
        f"--gpu-memory-utilization {utilization} --max-num-batched-tokens 16384 --max-model-len {max_model_len} "
        f"--host {node.host.address} --port {node.port}\n"
    )


def active_state(node: Node) -> str:
    return node.show("ActiveState", unit=UNIT)["ActiveState"]


def reported_tokens(node: Node) -> int | None:
    return parse_vllm_startup(node.journal(UNIT)).kv_tokens


def rows(result: dict[str, Any]) -> dict[float, dict[str, Any]]:
    return {row["mem_fraction_static"]: row for row in result["plan"]["rows"]}


def test_plan_predicts_the_pool_and_holds_the_max_model_len_floor(node: Node) -> None:
    node.install(vllm_unit(node, 0.95), name=UNIT)
    assert reported_tokens(node) == 60720
    died = node.http("POST", "/v1/completions", {"prompt": [7] * 32000, "max_tokens": 8})
    assert died.status == 500, died
    poll(lambda: active_state(node) == "failed", deadline=15, what="the engine's death")

    planned = node.cli("plan", "--unit", UNIT)
    assert planned.returncode == 0, planned
    result = planned.result
    plan = result["plan"]
    assert plan["engine"] == "vllm" and plan["flags"]["fraction"] == "--gpu-memory-utilization"
    vllm = plan["vllm"]
    assert (vllm["gpu_memory_utilization"], vllm["kv_tokens"], vllm["available_kv_gib"]) == (0.95, 60720, 46.33)
    assert (vllm["total_gib"], vllm["total_source"]) == (79.19, "torch's OOM text")
    assert (vllm["max_model_len"], vllm["floor_utilization"]) == (LONG, 0.92)
    choice = plan["choice"]
    assert choice["mem_fraction_static"] == 0.92 and choice["chunked_prefill_size"] == 4096
    assert any("--max-model-len" in w and "kept 0.92" in w for w in plan["warnings"]), plan["warnings"]
    table = rows(result)
    assert not table[0.91]["viable"] and table[0.92]["viable"] and table[0.92]["chosen"]
    predicted = table[0.92]["max_total_num_tokens"]

    node.install(vllm_unit(node, 0.92), name=UNIT)  # the choice, by hand: the same batched budget
    reported = reported_tokens(node)
    assert reported is not None and abs(predicted - reported) / reported < 0.005, (predicted, reported)

    node.install(vllm_unit(node, 0.91), name=UNIT, start=False)  # one below the floor: vLLM refuses to start
    node.host.systemctl("restart", UNIT)
    poll(lambda: active_state(node) == "failed", deadline=15, what="the refusal below the floor")
    assert any("To serve at least one request with the models's max seq len (57344)" in line
               for line in node.journal(UNIT))  # fmt: skip


def test_oom_auto_fixes_the_32k_crash_held_at_the_floor(node: Node) -> None:
    node.install(vllm_unit(node, 0.95), name=UNIT)
    died = node.http("POST", "/v1/completions", {"prompt": [7] * 32000, "max_tokens": 8})
    assert died.status == 500, died
    poll(lambda: active_state(node) == "failed", deadline=15, what="the engine's death")

    run = node.cli("oom", "--unit", UNIT, "--auto", "--probe", "32000", "--wait-timeout", "60")
    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated" and result["engine"] == "vllm", result
    assert result["flags"]["after"] == {"gpu_memory_utilization": "0.92", "max_num_batched_tokens": "4096"}
    held = [w for w in result["warnings"] if w.startswith("the headroom wants --gpu-memory-utilization 0.91,")]
    assert len(held) == 1 and "kept 0.92" in held[0] and "--max-model-len" in held[0], result["warnings"]
    predicted = rows(result)[0.92]["max_total_num_tokens"]
    # The smaller batched budget's profile peak is smaller: the prediction (57,600) is a floor of the pool.
    assert result["max_total_num_tokens"] == reported_tokens(node) == 61536 and predicted == 57600
    assert result["probe"]["ok"] is True and result["probe"]["prompt_tokens"] == 32000, result["probe"]
    served = node.http("POST", "/v1/completions", {"prompt": [7] * 32000, "max_tokens": 8})
    assert served.status == 200 and served.json()["usage"]["prompt_tokens"] == 32000, served


def test_bench_sends_exact_token_ids_through_v1_completions(node: Node) -> None:
    node.install(vllm_unit(node, 0.92, max_model_len=40960, dev_mode=True), name=UNIT)
    run = node.cli("bench", "--unit", UNIT, "--contexts", "1k,8k,48k", "--gen", "8")
    assert run.returncode == 0, run
    result = run.result
    assert result["max_total_num_tokens"] == reported_tokens(node) and result["endpoint"].endswith(f":{node.port}")
    points = {p["requested"]: p for p in result["points"]}
    for length in (1024, 8192):
        point = points[length]
        assert point["status"] == "ok" and point["note"] == "", point
        assert point["prompt_tokens"] == length and point["runs"] == 1, point
    skipped = points[49152]
    assert skipped["status"] == "skipped" and "context length 40,960" in skipped["note"]

    node.install(vllm_unit(node, 0.92, max_model_len=40960), name=UNIT, start=False)  # no VLLM_SERVER_DEV_MODE
    node.host.systemctl("restart", UNIT)
    node.wait_healthy(UNIT)
    again = node.cli("bench", "--unit", UNIT, "--contexts", "1k", "--gen", "4")
    assert again.returncode == 0, again
    (point,) = again.result["points"]
    assert point["status"] == "ok" and point["prompt_tokens"] == 1024
    assert "/reset_prefix_cache answered 404" in point["note"] and "unique" in point["note"]
