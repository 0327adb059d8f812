"""The single-host runner on a vLLM unit (scripted FakeTransport): the engine in the result, the pool read from
the startup lines when the unit is already remediated, `--auto`'s plan held at the max_model_len floor, the recipe
refused below that floor, a --probe longer than --max-model-len refused before anything is written."""

from __future__ import annotations

from decimal import Decimal

from remediate.core.unitfile.edit import DesiredState
from remediate.host.common.options import BudgetOptions, RunOptions
from remediate.host.oom.runner import remediate_host
from remediate.host.status.status import status_host
from remediate.models import HostResult
from tests.support.hosts import NOW, incident_host
from tests.support.journals import VLLM_CRASH as CRASH
from tests.support.journals import VLLM_SMI as SMI
from tests.support.journals import VLLM_START as START

UNIT = "vllm.service"
PATH = f"/etc/systemd/system/{UNIT}"
ARGV = ["/usr/bin/vllm", "serve", "/models/m", "--port", "8001"]
REMEDIATED = (
    "[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
    "# remediate: oom 2026-12-04T06:00:00Z gpu-memory-utilization 0.95->0.94\n"
    "ExecStart=/usr/bin/vllm serve /models/m --port 8001 --gpu-memory-utilization 0.94 --max-num-batched-tokens 4096\n"
)
STARTED = (
    "(EngineCore_DP0 pid=41) INFO 12-04 06:00:09 [gpu_worker.py:298] Available KV cache memory: 48.54 GiB\n"
    "(EngineCore_DP0 pid=41) INFO 12-04 06:00:09 [kv_cache_utils.py:1087] GPU KV cache size: 63,616 tokens\n"
)


def _host(text: str = REMEDIATED, active: str = "active"):  # type: ignore[no-untyped-def]
    host = incident_host(text=text, unit=UNIT, path=PATH, argv=ARGV, active=active, journal=STARTED)
    host.on(r"environ", "@@none\n@@end\n")
    return host


def _run(host, **options: object) -> HostResult:  # type: ignore[no-untyped-def]
    return remediate_host(host, RunOptions(unit=UNIT, **options), now=lambda: NOW)  # type: ignore[arg-type]


def test_an_already_remediated_vllm_unit_is_unchanged_with_its_pool() -> None:
    host = _host()
    host.http("/health", 200)
    result = _run(host)
    assert result.outcome == "unchanged" and result.exit_code == 0, result.error
    assert result.engine == "vllm" and result.max_total_num_tokens == 63616
    assert result.flags_before == {"gpu_memory_utilization": "0.94", "max_num_batched_tokens": "4096"}
    assert host.scripts("# remediate commit") == []
    assert {call.path for call in host.http_calls} == {"/health", "/metrics"}  # no sglang /server_info
    assert all(call.port == 8001 for call in host.http_calls)


# The 32k incident: a unit at 0.95 with 16384 batched tokens and --max-model-len 57344 (the floor is 0.92).
CRASHED_ARGV = [
    *ARGV,
    "--gpu-memory-utilization",
    "0.95",
    "--max-num-batched-tokens",
    "16384",
    "--max-model-len",
    "57344",
]
CRASHED = "[Service]\nExecStart=" + " ".join(CRASHED_ARGV) + "\n"
EVIDENCE = "\n".join([*START, "@@journal-tail", *START, *CRASH, "@@smi", *SMI]) + "\n"


def _crashed():  # type: ignore[no-untyped-def]
    # the journal answers the budget's one read: startup lines, the journal's tail, nvidia-smi
    return incident_host(text=CRASHED, unit=UNIT, path=PATH, argv=CRASHED_ARGV, journal=EVIDENCE)


def test_a_probe_longer_than_the_units_max_model_len_is_refused_before_any_write() -> None:
    host = _crashed()
    result = _run(host, probe_tokens=57344)
    assert result.exit_code == 2, result
    assert "--probe 57,344 + 1 generated token exceeds the context length 57,344 (the unit's --max-model-len)" in (
        result.error or ""
    )
    assert host.scripts("# remediate commit") == [] and host.http_calls == []


def test_auto_plans_a_vllm_unit_and_holds_the_max_model_len_floor() -> None:
    host = _crashed()
    result = _run(host, auto=BudgetOptions(), dry_run=True)
    assert result.error is None and result.changed, result.error
    assert result.flags_after == {"gpu_memory_utilization": "0.92", "max_num_batched_tokens": "4096"}
    plan = result.plan
    assert plan is not None
    assert plan["engine"] == "vllm" and plan["vllm"]["floor_utilization"] == 0.92
    assert any("wants --gpu-memory-utilization 0.91," in w and "kept 0.92" in w and "--max-model-len" in w
               for w in result.warnings), result.warnings  # fmt: skip
    assert "--auto: --gpu-memory-utilization 0.92 (predicted 57,600 tokens)" in " ".join(result.notes)
    assert "--gpu-memory-utilization 0.92 --max-num-batched-tokens 4096" in (result.diff or "")
    assert host.scripts("# remediate commit") == []


def test_the_recipe_below_the_floor_is_refused_with_the_alternative() -> None:
    below = DesiredState(mem_fraction_static=Decimal("0.90"))
    host = _crashed()
    result = _run(host, desired=below)
    assert result.exit_code == 1 and result.error is not None, result
    refusal = "gpu-01: refusing the OOM recipe: --gpu-memory-utilization 0.9 is below 0.92"
    assert result.error.startswith(refusal), result.error
    assert "use 0.92, or set an explicit --max-model-len (at most 55,520 at 0.9)" in result.error
    assert "\n" not in result.error and host.scripts("# remediate commit") == []
    dry = _run(_crashed(), desired=below, dry_run=True)
    assert dry.error is None and any(w.startswith("a real run refuses without --force: ") for w in dry.warnings)
    forced = _run(_crashed(), desired=below, dry_run=True, force=True)
    assert forced.error is None and any(w.startswith("--force: --gpu-memory-utilization 0.9 ") for w in forced.warnings)


def test_the_recipe_above_the_floor_is_not_held() -> None:
    host = _crashed()
    result = _run(host, dry_run=True)  # the step: 0.95 -> 0.94
    assert result.error is None and result.flags_after["gpu_memory_utilization"] == "0.94", result.error
    assert not any("max_model_len" in w for w in result.warnings), result.warnings


def test_status_names_the_engine_and_the_pool() -> None:
    host = _host()
    result = status_host(host, RunOptions(unit=UNIT), now=lambda: NOW)
    assert result.engine == "vllm" and result.status is not None and result.status.remediated is True
    assert result.max_total_num_tokens == 63616


# vllm/v1/metrics/loggers.py PrometheusStatLogger.log_metrics_info: CacheConfig.metrics_info() as labels (0.11.0)
METRICS = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",gpu_memory_utilization="0.94",'
    'num_gpu_blocks="3976",num_gpu_blocks_override="None"} 1.0\n'
)


def _journal_gone():  # type: ignore[no-untyped-def]
    """The unit's journal without its startup lines (rotated, or dropped by journald's rate limit)."""
    host = incident_host(text=REMEDIATED, unit=UNIT, path=PATH, argv=ARGV, active="active", journal="\n")
    host.on(r"environ", "@@none\n@@end\n")
    host.http("/metrics", (200, METRICS))
    return host


def test_status_reads_the_pool_from_metrics_where_the_journal_lost_its_line() -> None:
    host = _journal_gone()
    result = status_host(host, RunOptions(unit=UNIT), now=lambda: NOW)
    assert result.max_total_num_tokens == 3976 * 16
    # /metrics for the pool, then /version for the engine's version: both on the unit's port
    assert [call.path for call in host.http_calls] == ["/metrics", "/version"]
    assert {call.port for call in host.http_calls} == {8001}


def test_a_remediated_unit_whose_journal_lost_its_line_is_still_unchanged() -> None:
    host = _journal_gone()
    host.http("/health", 200)
    result = _run(host)
    assert result.outcome == "unchanged" and result.max_total_num_tokens == 3976 * 16, result.error
    assert host.scripts("# remediate commit") == []


def test_status_is_drift_when_metrics_say_the_server_runs_another_utilization() -> None:
    """The unit says 0.94; vllm:cache_config_info says the running server was started at 0.95."""
    host = _host()
    host.http("/metrics", (200, METRICS.replace('gpu_memory_utilization="0.94"', 'gpu_memory_utilization="0.95"')))
    result = status_host(host, RunOptions(unit=UNIT), now=lambda: NOW)
    assert result.outcome == "drift" and result.max_total_num_tokens == 63616  # the journal's line first
    assert any("gpu_memory_utilization=0.95" in w and "0.94" in w for w in result.warnings), result.warnings


def test_status_with_metrics_agreeing_is_not_drift() -> None:
    host = _host()
    host.http("/metrics", (200, METRICS))
    result = status_host(host, RunOptions(unit=UNIT), now=lambda: NOW)
    assert result.outcome == "unchanged" and not result.warnings, result.warnings


def test_a_remediated_unit_whose_server_runs_another_utilization_is_restarted() -> None:
    host = _journal_gone()
    host.http("/metrics", (200, METRICS.replace('gpu_memory_utilization="0.94"', 'gpu_memory_utilization="0.95"')))
    host.http("/health", 200)
    result = _run(host, dry_run=True)
    assert result.outcome == "drift", result.error
    assert any("gpu_memory_utilization=0.95" in n for n in result.notes), result.notes
