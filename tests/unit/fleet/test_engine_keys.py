"""Inventory keys named for vLLM (gpu_memory_utilization, max_num_batched_tokens) reach vLLM units only; the
neutral keys and the command line mean "the fraction" / "the prefill bound" for every engine."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from remediate.core.unitfile.edit import SourceFile, UnitSources, plan_edit
from remediate.errors import ConfigError
from remediate.fleet.inventory import load_inventory
from remediate.fleet.request import DesiredArgs
from remediate.fleet.settings import desired_state

NOW = datetime(2026, 12, 4, 7, 0, tzinfo=UTC)
VLLM = "[Service]\nExecStart=/usr/bin/vllm serve /m --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384\n"
SGLANG = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m --mem-fraction-static 0.94\n"


def _after(text: str, settings: dict[str, object], cli: DesiredArgs | None = None) -> tuple[str, str]:
    desired = desired_state(cli or DesiredArgs(), settings)
    plan = plan_edit(UnitSources(SourceFile("/etc/systemd/system/x.service", text)), desired, now=NOW)
    return str(plan.after.mem_fraction_static), str(plan.after.chunked_prefill_size)


def test_vllm_keys_apply_to_vllm_units_only() -> None:
    settings = {"gpu_memory_utilization": 0.85, "max_num_batched_tokens": 2048, "mem_fraction_static": 0.9}
    assert _after(VLLM, settings) == ("0.85", "2048")
    assert _after(SGLANG, settings) == ("0.9", "4096")  # the neutral key; vLLM's are not sglang's


def test_the_command_line_beats_the_vllm_keys() -> None:
    settings = {"gpu_memory_utilization": 0.85, "max_num_batched_tokens": 2048}
    cli = DesiredArgs(mem_fraction_static=Decimal("0.8"), chunked_prefill_size=1024)
    assert _after(VLLM, settings, cli) == ("0.8", "1024")
    assert _after(VLLM, settings, DesiredArgs(mem_fraction_step=Decimal("0.02"))) == ("0.93", "2048")


def test_the_neutral_fraction_is_vllms_utilization_too() -> None:
    assert _after(VLLM, {"mem_fraction_static": 0.9}) == ("0.9", "4096")


def test_a_vllm_unit_cannot_switch_the_prefill_bound_off() -> None:
    with pytest.raises(ConfigError, match="--max-num-batched-tokens must be >= 1 for a vLLM unit"):
        _after(VLLM, {}, DesiredArgs(chunked_prefill_size=-1))


@pytest.mark.parametrize(("line", "error"), [
    ("gpu_memory_utilization: 1.5", "gpu_memory_utilization 1.5 must be in (0, 1)"),
    ("max_num_batched_tokens: 0", "max_num_batched_tokens must be ≥ 1"),
])  # fmt: skip
def test_bad_vllm_keys_are_refused_by_line(tmp_path, line: str, error: str) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(f"hosts:\n  gpu-01:\n    {line}\n")
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        load_inventory(path)
