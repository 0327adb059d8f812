"""The renderers through the engine seam: a status table with a vLLM host names the engine, the fraction and the
prefill bound; an sglang-only table keeps its own words; the tokens line names vLLM's capacity line."""

from __future__ import annotations

import io

from rich.console import Console

from remediate.cli.render.results import status_table
from remediate.models import HostResult, StatusReport, UnitState


def _result(name: str, engine: str, flags: dict[str, str | None]) -> HostResult:
    result = HostResult(host=name)
    result.unit = f"{engine}.service"
    result.flags_before = flags
    result.engine = engine
    result.status = StatusReport(remediated=False, state=UnitState("active", "running"), need_daemon_reload=False)
    return result


def _render(results: list[HostResult]) -> str:
    out = io.StringIO()
    status_table(Console(file=out, width=200), results)
    return out.getvalue()


def test_a_mixed_fleet_gets_an_engine_column() -> None:
    text = _render([
        _result("gpu-1", "sglang", {"mem_fraction_static": "0.94", "chunked_prefill_size": None}),
        _result("gpu-2", "vllm", {"gpu_memory_utilization": "0.95", "max_num_batched_tokens": "16384"}),
    ])  # fmt: skip
    assert "server units" in text and "engine" in text and "prefill" in text
    vllm_row = next(line for line in text.splitlines() if "gpu-2" in line)
    assert "vllm" in vllm_row and "0.95" in vllm_row and "16384" in vllm_row


def test_an_sglang_fleet_keeps_its_columns() -> None:
    text = _render([_result("gpu-1", "sglang", {"mem_fraction_static": "0.94", "chunked_prefill_size": "4096"})])
    assert "sglang units" in text and "mem-fraction" in text and "engine" not in text
