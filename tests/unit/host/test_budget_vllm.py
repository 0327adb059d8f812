"""A vLLM unit's budget evidence read from what the host returned, the plan, its JSON, `oom --auto`'s choice."""

from __future__ import annotations

import io
from decimal import Decimal

from rich.console import Console

from remediate.cli.render.plan import plan_table
from remediate.core.capacity.observation import Observation
from remediate.core.engines.vllm.argv import parse_vllm_args
from remediate.core.engines.vllm.capacity import CacheConfig, parse_cache_config
from remediate.core.unitfile.edit import DesiredState
from remediate.host.common.options import BudgetOptions
from remediate.host.plan.budget_vllm import (
    auto_desired_vllm,
    evidence_from,
    models_max_len,
    plan_vllm,
    recipe_warning,
    smi_total_gib,
    vllm_plan_document,
)
from tests.support.journals import VLLM_CRASH as CRASH
from tests.support.journals import VLLM_SMI as SMI
from tests.support.journals import VLLM_START as START

ARGS = "--model standin/mha-13b-40k --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --max-model-len 57344"


def evidence(
    args: str = ARGS, *, journal: list[str] | None = None, smi: list[str] = SMI, cache: CacheConfig | None = None
):
    lines = START + CRASH if journal is None else journal
    parsed = parse_vllm_args(args.split(), serve=False)
    return evidence_from(parsed, lines, lines, smi, cache or CacheConfig(), None, "PYTHONUNBUFFERED=1")


def test_the_evidence_prefers_the_running_server_then_the_log_then_the_unit() -> None:
    ev = evidence()
    numbers = ev.numbers
    assert (numbers.utilization, numbers.block_size, numbers.max_model_len) == (0.95, 16, 57344)
    assert (round(numbers.total_gib or 0, 4), numbers.total_source) == (79.19, "torch's OOM text")
    assert ev.batched == 16384 and not ev.is_expandable and ev.model == "standin/mha-13b-40k"
    assert ev.spike is not None and ev.spike.fraction == 0.95 and abs(ev.spike.tried_bytes - 2.79 * (1 << 30)) < 1
    running = evidence(cache=CacheConfig(3600, 16, 0.92))
    assert running.numbers.utilization == 0.92  # /metrics: what the server runs with, whatever the unit says now
    healthy = evidence(journal=START)
    assert healthy.spike is None and healthy.spike_note and healthy.numbers.total_source.startswith("nvidia-smi")
    assert abs((healthy.numbers.total_gib or 0) - 79.19) < 0.01
    bare = evidence("--model m", journal=START, smi=[])
    assert (bare.numbers.utilization, bare.numbers.total_gib, bare.batched) == (0.9, None, None)
    assert smi_total_gib(["[N/A], 1", "garbage"]) is None
    assert models_max_len({"data": [{"max_model_len": 40960}]}) == 40960 and models_max_len({"data": "x"}) is None


def test_the_plan_holds_the_floor_and_auto_takes_the_held_choice() -> None:
    ev = evidence()
    budget = plan_vllm(ev, BudgetOptions(), "gpu-1")
    assert budget.plan is not None and budget.plan.chosen is not None and budget.plan.chosen.fraction == 0.92
    doc = vllm_plan_document(budget, ev)
    assert doc["engine"] == "vllm" and doc["vllm"]["floor_utilization"] == 0.92
    assert doc["choice"]["mem_fraction_static"] == 0.92 and doc["choice"]["chunked_prefill_size"] == 4096
    assert doc["current"]["max_total_num_tokens"] == 60720
    assert [c["source"] for c in doc["calibration"]] == ["last start"]
    assert recipe_warning(budget, ev, 0.94) is None
    assert "vLLM would refuse to start; use 0.92" in (recipe_warning(budget, ev, 0.90) or "")
    desired, notes = auto_desired_vllm(budget, DesiredState())
    assert desired.mem_fraction_static == Decimal("0.92") and desired.chunked_prefill_size == 4096
    assert desired.alloc_conf == "expandable_segments:True"
    assert notes == ["--auto: --gpu-memory-utilization 0.92 (predicted 57,600 tokens), --max-num-batched-tokens 4096, "
                     "expandable_segments:True"]  # fmt: skip


def test_no_total_no_plan_and_auto_says_so() -> None:
    ev = evidence(journal=START, smi=[])
    budget = plan_vllm(ev, BudgetOptions(), "gpu-1")
    assert budget.model is None and budget.plan is None
    desired, (note,) = auto_desired_vllm(budget, DesiredState())
    assert desired == DesiredState() and "total memory is unknown" in note and "plain recipe" in note


def test_observations_of_vllm_calibrate_and_sglangs_do_not() -> None:
    ev = evidence(cache=CacheConfig(3795, 16, 0.95))
    records = (
        Observation("gpu-1", "standin/mha-13b-40k", None, 0.90, 55536, engine="vllm", command="oom", at="t1"),
        Observation("gpu-1", "standin/mha-13b-40k", None, 0.80, 1, command="oom", at="t0"),  # sglang's: ignored
    )
    budget = plan_vllm(ev, BudgetOptions(observations=records), "gpu-1")
    errors = [(e.fraction, e.measured) for e in budget.errors]
    assert errors == [(0.90, 55536), (0.95, 60720)]  # the model before the fit: one block off at 0.90
    assert all(abs(e.relative) < 0.001 for e in budget.errors)
    assert budget.model is not None and budget.model.predict(0.90).tokens == 55536  # fitted on both


def test_the_table_names_vllms_flags() -> None:
    ev = evidence()
    doc = vllm_plan_document(plan_vllm(ev, BudgetOptions(), "gpu-1"), ev)
    out = io.StringIO()
    plan_table(Console(file=out, width=200, color_system=None), doc)
    text = out.getvalue()
    assert "gpu-memory-util" in text and "max_req_input_len" not in text and "won't start" in text
    assert "choice  --gpu-memory-utilization 0.92 --max-num-batched-tokens 4096" in text
    assert "GPU total 79.19 GiB (torch's OOM text); one request of max_model_len 57,344 fits from 0.92 up" in text
    assert parse_cache_config("").tokens is None


def test_a_healthy_vllm_start_leaves_a_vllm_calibration_record() -> None:
    from remediate.host.plan.observe import vllm_observation
    from remediate.models import HostResult

    result = HostResult(host="gpu-1")
    result.flags_after = {"gpu_memory_utilization": "0.95", "max_num_batched_tokens": "4096"}
    record = vllm_observation(result, START, 60720, command="oom", at="2026-12-04T06:00:00Z")
    assert record is not None and (record.engine, record.fraction, record.tokens) == ("vllm", 0.95, 60720)
    assert (record.model_path, record.kv_gib, record.chunked_prefill_size) == ("standin/mha-13b-40k", 46.33, 4096)
    assert vllm_observation(result, START, 60000, command="oom", at="") is None  # another start answered
    result.flags_after = {}
    assert vllm_observation(result, START, 60720, command="oom", at="") is None  # the utilization is unknown


def test_plan_host_reads_a_running_vllm_unit_in_one_journal_round_trip() -> None:
    import json as _json

    from remediate.host.common.options import RunOptions
    from remediate.host.plan.plan import plan_host
    from tests.support.hosts import JOURNAL, incident_host

    argv = ("/usr/bin/vllm", "serve", "standin/mha-13b-40k", "--gpu-memory-utilization", "0.95", "--port", "8001")
    journal = "\n".join([*START, "@@journal-tail", *START, *CRASH, "@@smi", *SMI]) + "\n"
    unit_text = "[Service]\nExecStart=" + " ".join(argv) + "\n"
    t = incident_host(
        text=unit_text, active="active", argv=argv, unit="vllm.service", path="/etc/systemd/system/vllm.service"
    )
    t.on(JOURNAL, journal)
    t.http(
        "/metrics",
        (200, 'vllm:cache_config_info{block_size="16",gpu_memory_utilization="0.95",num_gpu_blocks="3795"} 1\n'),
    )
    t.http("/v1/models", (200, _json.dumps({"data": [{"id": "m", "max_model_len": 57344}]})))
    result = plan_host(t, RunOptions(unit="vllm.service"), BudgetOptions())
    assert result.error is None and result.outcome == "unchanged", result.error
    plan = result.plan
    assert plan is not None
    assert plan["engine"] == "vllm" and plan["vllm"]["max_model_len"] == 57344 and result.max_total_num_tokens == 60720
    assert [c.path for c in t.http_calls] == ["/metrics", "/v1/models"] and {c.port for c in t.http_calls} == {8001}
    assert plan["choice"]["mem_fraction_static"] == 0.92 and [c["source"] for c in plan["calibration"]] == [
        "running server"
    ]


PV = "Dec 04 03:20:01 gpu1 vllm[4242]: (EngineCore_DP0 pid=4300) "

# vllm 0.11 vllm/v1/worker/gpu_worker.py Worker.determine_available_memory, kv_cache_memory_bytes set (its own
# "does does" typo kept); the GPU KV cache size line follows as in any start.
KV_BYTES_START = [
    f"{PV}INFO 12-04 03:20:09 [gpu_worker.py:251] Initial free memory 78.62 GiB, reserved 40.00GiB memory for KV "
    "Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does does not respect "
    "the gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual control of KV "
    "cache memory size. If OOM'ed, check the difference of initial free memory between the current run and the "
    "previous run where kv_cache_memory_bytes is suggested and update it correspondingly.",
    f"{PV}INFO 12-04 03:20:09 [kv_cache_utils.py:1087] GPU KV cache size: 52,416 tokens",
]


def test_a_unit_sized_in_bytes_is_not_planned_and_auto_falls_to_the_refused_recipe() -> None:
    """plan and `oom --auto`: one line naming the flag, from the unit's argv or from the start's own line (a
    --config file's value); the plain recipe is then refused by plan_edit (tests/data/unitfile_cases/
    vllm-kv-cache-memory-bytes)."""
    args = parse_vllm_args("--model m --kv-cache-memory-bytes 40G".split(), serve=False)
    ev = evidence_from(args, KV_BYTES_START, KV_BYTES_START, SMI, CacheConfig(), None)
    planned = plan_vllm(ev, BudgetOptions(), "gpu-01")
    assert planned.plan is None and planned.notes[-1].startswith("--kv-cache-memory-bytes 40G sizes the KV cache")
    desired, notes = auto_desired_vllm(planned, DesiredState())
    assert desired == DesiredState() and "--kv-cache-memory-bytes 40G" in notes[0]
    logged = evidence_from(parse_vllm_args(["--model", "m"], serve=False), KV_BYTES_START, [], [], CacheConfig(), None)
    assert logged.kv_bytes == "(40 GiB at the last start)"


def test_a_unit_without_a_utilization_runs_at_its_release_default() -> None:
    # 0.19.1 vllm/config/cache.py Field(default=0.9); 0.20.0 Field(default=0.92) (core/engines/vllm/defaults.py)
    args = "--model standin/mha-13b-40k --max-model-len 57344"
    v020 = ["INFO 12-04 03:20:00 [launcher.py:368]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.20.0"]
    v011 = ["INFO 12-04 03:20:00 [api_server.py:1839] vLLM API server version 0.11.0"]
    assert evidence(args, journal=v020 + START + CRASH).numbers.utilization == 0.92
    assert evidence(args, journal=v011 + START + CRASH).numbers.utilization == 0.9
    assert evidence(args).numbers.utilization == 0.9  # no version line: as before
