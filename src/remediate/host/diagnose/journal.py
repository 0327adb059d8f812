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
from remediate.core.engines.vllm.defaults import default_utilization_at
from remediate.core.journal import SavedJournal
from remediate.core.unitfile.edit import UnitSettings, UnitSources
from remediate.core.unitfile.engine import disk_engine
from remediate.core.unitfile.report import mask_secrets
from remediate.host.common.options import BudgetOptions
from remediate.host.common.outcome import host_outcome, new_result
from remediate.host.diagnose.diagnose import DiagnosisEvidence, advisor_input, journal_diagnosis, recipe_command
from remediate.host.plan.budget import settings_note
from remediate.host.plan.plan import put_plan
from remediate.host.plan.planner import journal_engine, plan_engine
from remediate.models import HostResult, JsonObject, UnitState

DIAGNOSE_ABSENT = ("systemctl", "nvidia-smi", "ps")
"""What a live `diagnose` reads besides the journal: the unit's state and restarts, the GPUs, the process tree."""


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
        settings, said = settings_note(unit, any(r.mem_fraction_static is not None for r in diagnosis.runs), unit_file)
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
    unit: UnitSources | None = None,
    unit_file: str | None = None,
    unit_name: str | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """`plan --journal`: the live plan of the saved messages, without the server to ask: the engine of the
    ``--unit-file`` (``unit``, as read), else the one whose startup lines the journal holds, plans them
    (host/plan/planner.py ``plan_saved``); what a live host would add is named as absent."""
    result = new_result(journal_label(saved, path), now)
    messages = [mask_secrets(m) for m in saved.messages if m.strip()]
    engine = (disk_engine(unit) if unit is not None else None) or journal_engine(messages)
    with host_outcome(result, now):
        plan = plan_engine(engine).plan_saved(saved, messages, unit, budget, result.host)
        result.unit = journal_unit(saved, unit_file, unit_name)
        result.unit_path = unit_file
        notes = [*_common_notes(saved, path, plan.absent), plan.said]
        put_plan(result, plan.planned, plan.document, budget, notes)
        result.source = source_document(saved, path, unit_file, plan.absent, plan.settings)
    return result
