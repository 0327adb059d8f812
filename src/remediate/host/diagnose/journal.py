"""`diagnose --journal` and `plan --journal`: a saved journal in place of a host's read, no host contacted.

The saved journal's lines (core/journal.py) go through the same functions as the live read's
(:func:`remediate.host.diagnose.diagnose.journal_diagnosis`, :func:`remediate.host.plan.budget.evidence_from`), so the
findings and the plan are the live ones for the same journal. What only a live host says is named in the
result's ``source.absent``: ``systemctl`` (ActiveState, SubState, NRestarts), ``nvidia-smi`` (the GPUs and
their processes), ``ps`` (the server's process tree) and, for ``plan``, ``server_info`` (the running server's
``/server_info``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from remediate.core.diagnosis import Diagnosis, Recommendation, advise, oom_command
from remediate.core.engines import ENGINES, engine_named
from remediate.core.engines.version import parse_log_version
from remediate.core.engines.vllm.argv import VllmArgs
from remediate.core.engines.vllm.capacity import CacheConfig
from remediate.core.engines.vllm.defaults import default_utilization_at
from remediate.core.engines.vllm.startup import parse_vllm_startup
from remediate.core.journal import SavedJournal
from remediate.core.startup import parse_startup
from remediate.core.unitfile.edit import UnitSettings
from remediate.core.unitfile.report import mask_secrets
from remediate.host.common.options import BudgetOptions
from remediate.host.common.outcome import host_outcome, new_result
from remediate.host.diagnose.diagnose import DiagnosisEvidence, advisor_input, journal_diagnosis, recipe_command
from remediate.host.plan.budget import evidence_from, plan_budget, plan_document
from remediate.host.plan.budget_vllm import JOURNAL_LINES as VLLM_JOURNAL_LINES
from remediate.host.plan.budget_vllm import evidence_from as vllm_evidence_from
from remediate.host.plan.budget_vllm import plan_vllm, vllm_plan_document
from remediate.host.plan.plan import put_plan
from remediate.models import HostResult, JsonObject, UnitState

DIAGNOSE_ABSENT = ("systemctl", "nvidia-smi", "ps")
"""What a live `diagnose` reads besides the journal: the unit's state and restarts, the GPUs, the process tree."""
PLAN_ABSENT = ("systemctl", "server_info")
"""What a live `plan` reads besides the journal and the unit: the unit's state, the server's /server_info."""
VLLM_PLAN_ABSENT = ("systemctl", "metrics", "v1_models", "nvidia-smi")
"""What a live `plan` of a vLLM unit reads besides the journal and the unit: its state, /metrics, /v1/models and
the GPUs' total memory."""


def journal_label(saved: SavedJournal, path: str) -> str:
    """The result's host: the one host the journal names, else the file."""
    return saved.hosts[0] if len(saved.hosts) == 1 else path


def journal_unit(saved: SavedJournal, unit_file: str | None, unit_name: str | None = None) -> str | None:
    """The unit: ``--unit``, else the unit file's name, else the one unit the journal names."""
    if unit_name:
        return unit_name
    if unit_file is not None:
        return unit_file.rsplit("/", 1)[-1]
    return saved.units[0] if len(saved.units) == 1 else None


def source_document(
    saved: SavedJournal, path: str, unit_file: str | None, absent: tuple[str, ...], settings: str | None
) -> JsonObject:
    """The result's ``source``: which journal, read how, and what a live host would have added."""
    return {
        "journal": path,
        "format": saved.format,
        "lines": len(saved.lines),
        "skipped": saved.skipped,
        "hosts": list(saved.hosts),
        "units": list(saved.units),
        "unit_file": unit_file,
        "settings": settings,
        "absent": list(absent),
    }


def _settings_note(unit: UnitSettings | None, has_server_args: bool, unit_file: str | None) -> tuple[str | None, str]:
    if unit is not None:
        return "unit_file", f"settings from {unit_file}"
    if has_server_args:
        return "journal", "no --unit-file: the settings are those the server logged (server_args)"
    return None, "no --unit-file and no server_args in the journal: the unit's settings are unknown"


def _common_notes(saved: SavedJournal, path: str, absent: tuple[str, ...]) -> list[str]:
    notes = [f"saved journal {path} ({saved.format}, {len(saved.lines)} lines): no host read; absent: "
             + ", ".join(absent)]  # fmt: skip
    if saved.skipped:
        notes.append(f"{saved.skipped} line(s) of {path} were not journal entries and were skipped")
    if len(saved.units) > 1:
        notes.append(f"the journal holds several units ({', '.join(saved.units)}): read as one")
    return notes


def diagnose_journal(
    saved: SavedJournal,
    path: str,
    *,
    unit: UnitSettings | None = None,
    unit_file: str | None = None,
    unit_name: str | None = None,
    lines: int | None = None,
    since_restarts: int | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """`diagnose --journal`: the live diagnosis of the saved lines (the last ``lines`` of them, as ``-n``)."""
    result = new_result(journal_label(saved, path), now)
    with host_outcome(result, now):
        read = list(saved.lines[-lines:] if lines else saved.lines)
        diagnosis, notes = journal_diagnosis(read, {}, since_restarts)
        evidence = _engine_evidence(read, diagnosis, notes, unit) or DiagnosisEvidence(
            diagnosis, advise(diagnosis, advisor_input(unit)), (), (), (), tuple(notes)
        )
        rec = evidence.recommendation
        result.unit = journal_unit(saved, unit_file, unit_name)
        result.unit_path = unit_file
        settings, said = _settings_note(unit, any(r.mem_fraction_static is not None for r in diagnosis.runs), unit_file)
        result.outcome = "unchanged"  # read-only: nothing was changed
        result.engine_version = parse_log_version(evidence.engine, read)  # vLLM's startup line (sglang logs none)
        result.notes = [*_common_notes(saved, path, DIAGNOSE_ABSENT), said, *evidence.notes]
        command = oom_command if evidence.verdict is None else recipe_command
        evidence.record(result, UnitState(), command(result.host, result.unit, rec))
        result.source = source_document(saved, path, unit_file, DIAGNOSE_ABSENT, settings)
    return result


def _engine_evidence(
    read: list[str], diagnosis: Diagnosis, notes: list[str], unit: UnitSettings | None
) -> DiagnosisEvidence | None:
    """The evidence of an engine with its own failure reader (vLLM): the --unit-file's engine, or without one,
    the engine whose reader recognises the journal where sglang's found nothing."""
    if unit is not None:
        candidates = [engine_named(unit.engine)]
    else:
        candidates = [] if diagnosis.findings else list(ENGINES.values())
    for engine in candidates:
        if engine.verdict is None or engine.advise is None:
            continue
        verdict = engine.verdict(read)
        if verdict is None and unit is None:
            continue
        fraction = unit.mem_fraction_static if unit is not None else None
        if fraction is None and (version := parse_log_version(engine.name, read)) is not None:
            default = default_utilization_at(version.release)  # the logged release's own (vllm/defaults.py)
            fraction = None if default is None else str(default)
        rec = engine.advise(verdict, fraction, 0, None) if verdict is not None else Recommendation()
        return DiagnosisEvidence(diagnosis, rec, (), (), (), tuple(notes), engine.name, verdict)
    return None


def plan_journal(
    saved: SavedJournal,
    path: str,
    budget: BudgetOptions,
    *,
    unit: UnitSettings | None = None,
    unit_file: str | None = None,
    unit_name: str | None = None,
    vllm: VllmArgs | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """`plan --journal`: the live plan of the saved messages, without ``/server_info`` (no server to ask); a
    vLLM unit's (``vllm``: its command line, or a journal of vLLM's startup lines and no sglang's) as
    host/plan/budget_vllm.py plans it live, without ``/metrics`` and nvidia-smi."""
    result = new_result(journal_label(saved, path), now)
    messages = [mask_secrets(m) for m in saved.messages if m.strip()]
    if vllm is not None or (unit is None and _is_vllm_journal(messages)):
        return _plan_vllm_journal(saved, path, budget, result, messages, vllm, unit_file, unit_name, now)
    with host_outcome(result, now):
        startup, tail = saved.plan_lines()
        evidence = evidence_from(
            [mask_secrets(m) for m in tail],
            None,
            unit or UnitSettings(None, None, None),
            startup_lines=[mask_secrets(m) for m in startup],
        )
        planned = plan_budget(evidence, budget, result.host)
        settings, said = _settings_note(unit, bool(evidence.startup.server_args), unit_file)
        result.unit = journal_unit(saved, unit_file, unit_name)
        result.unit_path = unit_file
        put_plan(result, planned, plan_document(planned), budget, [*_common_notes(saved, path, PLAN_ABSENT), said])
        result.source = source_document(saved, path, unit_file, PLAN_ABSENT, settings)
    return result


def _is_vllm_journal(messages: list[str]) -> bool:
    return parse_vllm_startup(messages).is_complete and not parse_startup(messages).server_args


def _plan_vllm_journal(
    saved: SavedJournal,
    path: str,
    budget: BudgetOptions,
    result: HostResult,
    messages: list[str],
    args: VllmArgs | None,
    unit_file: str | None,
    unit_name: str | None,
    now: Callable[[], float],
) -> HostResult:
    with host_outcome(result, now):
        tail = messages[-VLLM_JOURNAL_LINES:]
        evidence = vllm_evidence_from(args, messages, tail, [], CacheConfig(), None)
        planned = plan_vllm(evidence, budget, result.host)
        settings = "unit_file" if args is not None else None
        said = (
            f"settings from {unit_file}"
            if args is not None
            else "no --unit-file: vLLM's defaults (--gpu-memory-utilization: the logged release's, else 0.9) and its "
            "log; pass the unit file"
        )
        result.unit = journal_unit(saved, unit_file, unit_name)
        result.unit_path = unit_file
        document = vllm_plan_document(planned, evidence)
        put_plan(result, planned, document, budget, [*_common_notes(saved, path, VLLM_PLAN_ABSENT), said])
        result.source = source_document(saved, path, unit_file, VLLM_PLAN_ABSENT, settings)
    return result
