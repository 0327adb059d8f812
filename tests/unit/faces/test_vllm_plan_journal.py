"""`plan --journal FILE --unit-file UNIT` on a vLLM unit: its saved startup and crash lines, its command line."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from remediate.cli import cli
from tests.support.journals import VLLM_CRASH as CRASH
from tests.support.journals import VLLM_START as START

UNIT = """[Unit]
Description=vLLM
[Service]
Environment=VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
ExecStart=/usr/bin/vllm serve standin/mha-13b-40k --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 \\
    --max-model-len 57344 --port 8000
"""


def test_a_vllm_crash_journal_and_its_unit_file_plan_like_the_live_host(tmp_path: Path) -> None:
    journal = tmp_path / "vllm.journal"
    journal.write_text("\n".join([*START, *CRASH]) + "\n")
    unit = tmp_path / "vllm.service"
    unit.write_text(UNIT)
    result = CliRunner().invoke(cli, ["plan", "--journal", str(journal), "--unit-file", str(unit), "--json"])
    assert result.exit_code == 0, result.stderr
    [doc] = json.loads(result.stdout)["results"]
    assert doc["source"]["absent"] == ["systemctl", "metrics", "v1_models", "nvidia-smi"]
    assert doc["source"]["settings"] == "unit_file" and doc["unit"] == "vllm.service"
    plan = doc["plan"]
    assert plan["engine"] == "vllm" and plan["vllm"]["floor_utilization"] == 0.92
    assert plan["choice"]["mem_fraction_static"] == 0.92 and doc["max_total_num_tokens"] == 60720
    text = CliRunner().invoke(cli, ["plan", "--journal", str(journal), "--unit-file", str(unit)])
    assert "choice  --gpu-memory-utilization 0.92" in text.stdout, text.stdout


def test_without_the_unit_file_the_log_and_vllms_defaults_plan(tmp_path: Path) -> None:
    journal = tmp_path / "vllm.journal"
    journal.write_text("\n".join([*START, *CRASH]) + "\n")
    result = CliRunner().invoke(cli, ["plan", "--journal", str(journal), "--json"])
    assert result.exit_code == 0, result.stderr
    [doc] = json.loads(result.stdout)["results"]
    vllm = doc["plan"]["vllm"]
    assert (vllm["gpu_memory_utilization"], vllm["max_model_len"]) == (0.9, None)  # the default: not what ran
    assert doc["source"]["settings"] is None
