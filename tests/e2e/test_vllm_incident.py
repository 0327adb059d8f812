"""The incident on a vLLM unit end to end (the vLLM stand-in as a systemd unit on a sandbox host): a 32k prompt
kills the server at 0.95 with 16384 batched tokens, `diagnose` says why, `oom` fixes it (0.94, 4096, expandable
segments), the 32k prompt is then served, a second `oom` changes nothing, `rollback` restores the old bytes; a
unit at 0.50 dies at startup and `oom` refuses it."""

from __future__ import annotations

import pytest

from tests.support.node import Node, poll
from tests.support.vllm import complete as _complete
from tests.support.vllm import vllm_unit as _unit

pytestmark = pytest.mark.e2e

UNIT = "vllm.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
ALLOC_LINE = "Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def _state(node: Node) -> str:
    return node.show("ActiveState", unit=UNIT)["ActiveState"]


def test_vllm_incident_diagnose_oom_once_and_rollback(node: Node) -> None:
    node.install(_unit(node, "0.95"), name=UNIT)
    original = node.bytes(UNIT_PATH)

    status = node.cli("status", "--unit", UNIT)
    assert status.returncode == 0, status
    assert status.result["engine"] == "vllm" and status.result["remediated"] is False
    assert status.result["max_total_num_tokens"] == 60720  # GPU KV cache size: 60,720 tokens
    assert status.result["flags"]["before"] == {"gpu_memory_utilization": "0.95", "max_num_batched_tokens": "16384"}

    # The incident: one 32k prompt's second 16k chunk does not fit beside the pool; the engine dies.
    crash = _complete(node, 32000)
    assert crash.status == 500, crash
    poll(lambda: _state(node) == "failed", deadline=20, what="the unit failed")

    why = node.cli("diagnose", "--unit", UNIT)
    assert why.returncode == 0, why
    assert why.result["engine"] == "vllm"
    [finding] = why.result["findings"]
    assert finding["kind"] == "runtime-oom" and finding["blocking"] is False
    assert finding["line"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.79 GiB")
    rec = why.result["recommendation"]
    assert rec["kind"] == "runtime-oom" and rec["blocking"] is False
    assert rec["other_flags"] == {"--gpu-memory-utilization": "0.94", "--max-num-batched-tokens": 4096}
    assert rec["alloc_conf"] == "expandable_segments:True"
    assert rec["command"] == f"remediate oom {node.host.name} --unit {UNIT}"
    human = node.cli("diagnose", "--unit", UNIT, json_out=False)
    assert "torch ran out of GPU memory in vLLM's engine" in human.stdout, human.stdout

    run = node.cli("oom", "--unit", UNIT, "--min-tokens", "60000", "--target-tokens", "64000", "--wait-timeout", "60")
    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated" and result["engine"] == "vllm", result
    assert result["flags"] == {
        "before": {"gpu_memory_utilization": "0.95", "max_num_batched_tokens": "16384"},
        "after": {"gpu_memory_utilization": "0.94", "max_num_batched_tokens": "4096"},
    }
    assert result["env"]["after"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert result["max_total_num_tokens"] == 63616  # GPU KV cache size: 63,616 tokens
    assert result["token_gap"] == pytest.approx(-0.006, abs=0.0005)
    assert any("GPU KV cache size 63,616" in w for w in result["warnings"]), result["warnings"]
    text = node.host.read(UNIT_PATH)
    assert "    --gpu-memory-utilization 0.94 \\" in text and "    --max-num-batched-tokens 4096" in text
    assert ALLOC_LINE in text.splitlines()
    assert node.server_env(UNIT)["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert node.backups(UNIT_PATH) != []

    served = _complete(node, 32000)
    assert served.status == 200, served
    assert served.json()["usage"]["prompt_tokens"] == 32000

    again = node.cli("oom", "--unit", UNIT, "--wait-timeout", "60")
    assert again.returncode == 0, again
    assert again.result["outcome"] == "unchanged" and again.result["changed"] is False, again.result
    assert again.result["max_total_num_tokens"] == 63616
    assert node.host.read(UNIT_PATH) == text

    back = node.cli("rollback", "--unit", UNIT, "--wait-timeout", "60")
    assert back.returncode == 0, back
    assert back.result["outcome"] == "restored", back.result
    assert node.bytes(UNIT_PATH) == original
    assert back.result["max_total_num_tokens"] == 60720


def test_vllm_unit_at_half_utilization_dies_at_startup_and_oom_refuses(node: Node) -> None:
    node.install(_unit(node, "0.50"), name=UNIT, start=False)
    assert node.host.systemctl("start", UNIT).returncode == 0
    poll(lambda: _state(node) == "failed", deadline=20, what="the startup failure")

    why = node.cli("diagnose", "--unit", UNIT)
    assert why.returncode == 0, why
    [finding] = why.result["findings"]
    assert finding["kind"] == "max-model-len" and finding["blocking"] is True
    assert finding["direction"] == "raise --gpu-memory-utilization or lower --max-model-len"
    assert finding["numbers"]["estimated_max_len"] == 14016
    assert finding["evidence"][-1].startswith("RuntimeError: Engine core initialization failed.")
    rec = why.result["recommendation"]
    assert rec["blocking"] is True and rec["other_flags"] == {"--max-model-len": 14016} and rec["command"] is None

    original = node.bytes(UNIT_PATH)
    refused = node.cli("oom", "--unit", UNIT, "--wait-timeout", "30")
    assert refused.returncode == 1, refused
    assert "refusing the OOM recipe" in refused.result["error"] and "max-model-len" in refused.result["error"]
    assert node.bytes(UNIT_PATH) == original and node.backups(UNIT_PATH) == []
