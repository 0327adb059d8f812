"""One host's memory budget: read the evidence, plan the fraction (read-only), or pick the values for `oom --auto`.

The evidence is what the host already has: the unit's journal (the last server start's memory lines and
any earlier crash), ``/server_info`` when the server answers, and the unit's own settings. The model and
the choice are the pure core's (:mod:`remediate.core.capacity.pool`, :mod:`remediate.core.capacity.headroom`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from remediate.core.capacity.floor import StatedFloor, hold_stated_floor, stated_floor
from remediate.core.capacity.headroom import BudgetPlan, Knobs, Spike, choose
from remediate.core.capacity.observation import matching
from remediate.core.capacity.pool import (
    GIB,
    BudgetModel,
    CalibrationError,
    Measured,
    Unmodelled,
    calibrate,
    offline_model,
)
from remediate.core.capacity.pool import model_from_server as _model_from_server
from remediate.core.diagnosis import Diagnosis, parse_journal
from remediate.core.engines.sglang.resolved import AITER_FACTOR, POST_CAPTURE_RULE, is_post_capture, resolve_fraction
from remediate.core.journal import SavedJournal
from remediate.core.numbers import as_int
from remediate.core.probe import ProbeResult
from remediate.core.startup import STARTUP_LINES_ERE as _STARTUP_LINES
from remediate.core.startup import ServerSettings, StartupNumbers, parse_server_info, parse_startup
from remediate.core.unitfile.alloc import has_expandable
from remediate.core.unitfile.edit import DesiredState, UnitSettings, read_settings
from remediate.core.unitfile.report import mask_secrets
from remediate.core.unitfile.sources import UnitSources
from remediate.errors import ConfigError
from remediate.host.common.facts import fetch_server_info
from remediate.host.common.options import BudgetOptions, RunOptions
from remediate.host.common.probe import endpoint_of
from remediate.host.common.verify import unit_env
from remediate.transport.base import Transport

JOURNAL_LINES = 5000  # enough for the last start and the crash before it, even with chatty access logs
DEFAULT_CHUNK = 4096
EXPANDABLE = "expandable_segments:True"


@dataclass(frozen=True)
class BudgetEvidence:
    """What the host says about its memory: the last start, the server's settings, a diagnosed spike."""

    startup: StartupNumbers
    info: ServerSettings | None
    fraction: float | None
    current: Knobs
    spike: Spike | None = None
    spike_note: str | None = None
    model_path: str | None = None
    tp_size: int | None = None
    floor: StatedFloor | None = None  # sglang's own "Raise --mem-fraction-static above Y" (core/capacity/floor.py)
    # core/engines/sglang/resolved.py: the pool is sized after CUDA-graph capture (asked in the unit, or logged)
    is_post_capture: bool = False
    scale: Decimal | None = None  # the aiter factor, where the server shows it applied to the unit's fraction
    resolution_note: str | None = None  # … and that rule, named


PLAN_ABSENT = ("systemctl", "server_info")
"""What a live `plan` reads besides the journal and the unit: the unit's state, the server's /server_info."""


@dataclass(frozen=True)
class HostBudget:
    evidence: BudgetEvidence
    model: BudgetModel | None
    plan: BudgetPlan | None
    errors: tuple[CalibrationError, ...] = ()
    notes: tuple[str, ...] = ()


def diagnosed_spike(journal: list[str], result: Diagnosis | None = None) -> tuple[Spike | None, str | None]:
    """The newest runtime CUDA OOM of a prefill with its numbers, as a spike (plus what was missing)."""
    result = result if result is not None else parse_journal(journal)
    ooms = [f for f in result.findings if f.kind == "cuda_oom_runtime" and f.tried_bytes]
    if not ooms:
        return None, "no runtime CUDA OOM in the journal"
    latest = [f for f in ooms if f.run == ooms[-1].run]  # every rank of the newest crash: the worst rank decides
    finding = min(latest, key=lambda f: (f.free_bytes or 0) + (f.reserved_unallocated_bytes or 0))
    runs = result.runs
    fraction = runs[finding.run].mem_fraction_static if 0 <= finding.run < len(runs) else None
    spike = Spike(
        tried_bytes=finding.tried_bytes or 0,
        prefill_tokens=finding.prefill_tokens if finding.phase in (None, "prefill", "unknown") else None,
        free_bytes=int(finding.free_bytes or 0),
        reserved_unallocated_bytes=int(finding.reserved_unallocated_bytes or 0),
        fraction=fraction,
    )
    return spike, None


# The startup memory lines, searched in the unit's whole journal: a server up for days has pushed its
# start far out of any tail, and a restart in progress keeps the previous start's numbers (``STARTUP_LINES_ERE``
# picks them, each at the start of its message, so logged requests never fill the 400).
_TAIL = "@@journal-tail"


def read_journal(transport: Transport, unit: str) -> tuple[list[str], list[str]]:
    """One round trip: the unit's startup memory lines (last 400 of them) and its last ``JOURNAL_LINES`` lines."""
    quoted = shlex.quote(unit)
    command = (
        f"journalctl -u {quoted} -o cat --no-pager 2>/dev/null | grep -E {shlex.quote(_STARTUP_LINES)} | tail -n 400; "
        f"echo {_TAIL}; journalctl -u {quoted} -o cat --no-pager -n {JOURNAL_LINES} 2>/dev/null"
    )
    out = transport.run(command).stdout
    head, marker, tail = out.partition(_TAIL + "\n")
    if not marker:
        head, tail = "", out
    clean = [mask_secrets(line) for line in head.splitlines() if line.strip()]
    return clean, [mask_secrets(line) for line in tail.splitlines() if line.strip()]


def read_budget_evidence(
    transport: Transport, found: ProbeResult, sources: UnitSources, options: RunOptions
) -> BudgetEvidence:
    """The journal (startup lines and the tail), ``/server_info`` when the server is up, the unit's settings."""
    state = found.state
    assert state is not None
    startup_lines, tail = read_journal(transport, state.unit)
    info = None
    if state.active_state == "active":
        document, _ = fetch_server_info(transport, *endpoint_of(found, options))
        info = parse_server_info(document) if document else None
    unit: UnitSettings = read_settings(sources)
    return evidence_from(tail, info, unit, startup_lines=startup_lines, env=unit_env(sources))


def evidence_from(
    journal: list[str],
    info: ServerSettings | None,
    unit: UnitSettings,
    *,
    startup_lines: Sequence[str] = (),
    env: Mapping[str, str | None] | None = None,
) -> BudgetEvidence:
    """``journal``: the tail (crash evidence); the startup lines come before it in time (duplicates are fine)."""
    startup = parse_startup([*startup_lines, *journal])
    args = startup.server_args
    fraction = info.mem_fraction_static if info else None
    if fraction is None and isinstance(args.get("mem_fraction_static"), float):
        fraction = float(args["mem_fraction_static"])
    if fraction is None and unit.mem_fraction_static is not None:
        try:
            fraction = float(unit.mem_fraction_static)
        except ValueError:
            fraction = None
    chunk = info.chunked_prefill_size if info else None
    if chunk is None:
        chunk = startup.chunked_prefill_size
    if chunk is None:
        chunk = as_int(unit.chunked_prefill_size, text=True)
    spike, note = diagnosed_spike(journal, diagnosis := parse_journal(journal))
    model_path = (info.model_path if info else None) or args.get("model_path")
    tp_size = (info.tp_size if info else None) or args.get("tp_size")
    scale, resolution_note = _aiter_scale(info, startup, unit, fraction, env or {})
    return BudgetEvidence(
        startup=startup,
        info=info,
        fraction=fraction,
        current=Knobs(chunk, has_expandable(unit.alloc_conf)),
        spike=spike,
        spike_note=note,
        model_path=model_path if isinstance(model_path, str) else None,
        tp_size=tp_size if isinstance(tp_size, int) else None,
        floor=stated_floor(diagnosis.findings),
        is_post_capture=is_post_capture(env or {}) or startup.post_capture_tokens is not None,
        scale=scale,
        resolution_note=resolution_note,
    )


def _aiter_scale(
    info: ServerSettings | None,
    startup: StartupNumbers,
    unit: UnitSettings,
    fraction: float | None,
    env: Mapping[str, str | None],
) -> tuple[Decimal | None, str | None]:
    """The aiter factor where the server's fraction shows it applied to the unit's written one (sglang
    arg_groups/attention_hook.py ``handle_attention_backend_compatibility``), and the rule named; else None."""
    backend = (info.attention_backend if info else None) or startup.server_args.get("attention_backend")
    if unit.mem_fraction_static is None or fraction is None or backend is None:
        return None, None
    context = startup.context_len or (info.context_length if info else None)
    resolved = resolve_fraction(unit.mem_fraction_static, attention_backend=str(backend), context_len=context, env=env)
    note = resolved.note(Decimal(str(fraction))) if resolved is not None else None
    return (AITER_FACTOR, note) if note is not None else (None, None)


def proposed_knobs(current: Knobs, options: BudgetOptions) -> Knobs:
    """The recipe's chunk (or the one asked for), kept when the server already runs a smaller one."""
    chunk = options.chunked_prefill_size or DEFAULT_CHUNK
    running = current.chunked_prefill_size
    if options.chunk_is_ceiling and running is not None and 0 < running < chunk:
        chunk = running
    return Knobs(chunk, True)


def plan_budget(evidence: BudgetEvidence, options: BudgetOptions, host: str) -> HostBudget:
    """Model (calibrated with this host's observations and its running server), then choose."""
    built = _model_from_server(evidence.startup, evidence.info, anchor=False)
    notes = [evidence.spike_note] if evidence.spike_note else []
    notes += [f"{evidence.floor.describe()}: {evidence.floor.line}"] if evidence.floor else []
    if evidence.is_post_capture:
        # No prediction is offered: the fraction → pool model does not hold when the pool is measured after capture.
        return HostBudget(evidence, None, None, notes=(*notes, f"{POST_CAPTURE_RULE}: the budget model does not apply"))
    if evidence.resolution_note is not None:
        notes.append(
            f"{evidence.resolution_note}: the fractions below are what the server runs; the unit is written "
            f"the fraction divided by {AITER_FACTOR}"
        )
    if isinstance(built, Unmodelled):
        return HostBudget(evidence, None, None, notes=(*notes, built.reason))
    if evidence.fraction is None:
        return HostBudget(evidence, built, None, notes=(*notes, "the server's --mem-fraction-static is unknown"))
    measured = matching(options.observations, host, evidence.model_path or "", evidence.tp_size)
    tokens = (evidence.info.max_total_num_tokens if evidence.info else None) or evidence.startup.max_total_num_tokens
    if tokens and not any(m.fraction == evidence.fraction and m.tokens == tokens for m in measured):
        measured.append(Measured(evidence.fraction, tokens, "running server"))  # unless recorded already
    model, errors = calibrate(built, measured)
    plan = choose(
        model,
        evidence.spike,
        centre=evidence.fraction,
        current=evidence.current,
        proposed=proposed_knobs(evidence.current, options),
        target_tokens=options.target_tokens,
        margin=options.margin,
        max_running_requests=evidence.info.max_running_requests if evidence.info else None,
    )
    return HostBudget(evidence, model, hold_stated_floor(plan, model, evidence.floor), errors, tuple(notes))


def crashed_fraction(budget: HostBudget) -> float | None:
    """The fraction the crashed server ran with (the spike's run), else the running one."""
    spike = budget.evidence.spike
    return spike.fraction if spike is not None and spike.fraction is not None else budget.evidence.fraction


def auto_desired(
    budget: HostBudget, desired: DesiredState, *, allow_raise: bool = False
) -> tuple[DesiredState, list[str]]:
    """`oom --auto`: the chosen fraction and chunk plus expandable segments, else the plain recipe (said so).
    The fraction never goes above the one that crashed unless ``allow_raise``: the margin is estimated from
    one sample of the spike, and a wrong estimate crashes again with less headroom than before."""
    plan = budget.plan
    floor = budget.evidence.floor
    if (plan is None or plan.chosen is None) and floor is not None:  # never the plain recipe's step down
        return replace(desired, mem_fraction_static=floor.lowest_decimal), [floor.auto_note()]
    if plan is None or plan.chosen is None:
        why = "; ".join([*budget.notes, *(plan.reasons if plan else ()), *(plan.warnings if plan else ())])
        return desired, [f"--auto: no plan from evidence ({why or 'no startup numbers'}): the plain recipe"]
    fraction = Decimal(f"{plan.chosen.fraction:.4f}").normalize()
    tokens = plan.chosen.prediction.tokens
    held: list[str] = []
    ceiling = crashed_fraction(budget)
    if floor is not None and floor.is_above(ceiling):  # the fraction that failed cannot start: no ceiling
        ceiling = None
        held.append(f"--auto: {floor.describe()}: above the fraction that failed, without --allow-raise")
    if not allow_raise and ceiling is not None and plan.chosen.fraction > ceiling + 1e-9:
        kept = Decimal(f"{ceiling:.4f}").normalize()
        held.append(
            f"--auto: the plan would raise --mem-fraction-static to {fraction} (above {kept}, the fraction that "
            f"crashed); kept {kept}: pass --allow-raise to let --auto raise it"
        )
        same = [r for r in plan.rows if abs(r.fraction - ceiling) < 1e-9]
        tokens = same[0].prediction.tokens if same else tokens
        fraction = kept
    chunk = plan.proposed.chunked_prefill_size
    scale = budget.evidence.scale
    if scale is not None:
        runs = fraction
        fraction = (fraction / scale).quantize(Decimal("0.0001")).normalize()
        held.append(f"--auto: writes --mem-fraction-static {fraction}, which sglang runs as {runs} (x{scale}, aiter)")
    auto = replace(
        desired,
        mem_fraction_static=fraction,
        chunked_prefill_size=chunk,
        chunk_is_ceiling=True,
        alloc_conf=desired.alloc_conf or EXPANDABLE,
    )
    return auto, [
        *held,
        f"--auto: --mem-fraction-static {fraction} (predicted {tokens:,} tokens), chunk {chunk}, {EXPANDABLE}",
    ]


# ------------------------------------------------------------------------------------------------ JSON


def _fit(fit: Any) -> dict[str, Any] | None:
    if fit is None:
        return None
    margin = fit.margin
    return {
        "fits": fit.fits,
        "need_bytes": fit.need_bytes,
        "usable_bytes": fit.usable_bytes,
        "spare_bytes": fit.spare_bytes,
        "margin": None if margin == float("inf") else round(margin, 4),
    }


def plan_document(budget: HostBudget) -> dict[str, Any]:
    """The ``plan`` object of a host's JSON result: model, evidence, every row, the choice."""
    ev, model, plan = budget.evidence, budget.model, budget.plan
    doc: dict[str, Any] = {
        "current": {
            "mem_fraction_static": ev.fraction,
            "chunked_prefill_size": ev.current.chunked_prefill_size,
            "expandable_segments": ev.current.is_expandable,
            "max_total_num_tokens": ev.info.max_total_num_tokens if ev.info else ev.startup.max_total_num_tokens,
        },
        "model": None,
        "spike": None,
        "rows": [],
        "choice": None,
        "calibration": [
            {
                "fraction": e.fraction,
                "predicted": e.predicted,
                "measured": e.measured,
                "error": round(e.relative, 6),
                "source": e.source,
                "text": str(e),
            }
            for e in budget.errors
        ],
        "notes": list(budget.notes),
    }
    if model is not None:
        doc["model"] = model_document(model)
    if ev.spike is not None:
        spike = ev.spike
        doc["spike"] = {
            "tried_bytes": spike.tried_bytes,
            "prefill_tokens": spike.prefill_tokens,
            "per_token_bytes": None if spike.per_token_bytes is None else round(spike.per_token_bytes, 1),
            "free_bytes": spike.free_bytes,
            "reserved_unallocated_bytes": spike.reserved_unallocated_bytes,
            "fraction": spike.fraction,
        }
    if plan is not None:
        doc.update(choice_document(plan))
    return doc


def model_document(model: BudgetModel) -> dict[str, Any]:
    return {
        "free0_gib": round(model.free0_gib, 4),
        "free1_gib": round(model.free1_gib, 4),
        "cell_bytes": round(model.cell_bytes, 1),
        "page_size": model.page_size,
        "max_total_tokens": model.max_total_tokens,
        "context_len": model.context_len,
        "overhead_gib": None if model.overhead_gib is None else round(model.overhead_gib, 4),
        "min_viable_fraction": round(model.min_viable_fraction(), 4),
        "anchor": None if model.anchor is None else {"fraction": model.anchor[0], "tokens": model.anchor[1]},
        "draft": None
        if model.draft is None
        else {
            "weights_gib": round(model.draft.weights_gib, 4),
            "cell_bytes": round(model.draft.cell_bytes, 1),
            "is_counted": model.draft.is_counted,
            "extra_tokens": model.draft.extra_tokens,
        },
        "notes": list(model.notes),
    }


def choice_document(plan: BudgetPlan) -> dict[str, Any]:
    """Rows, the choice, the target and the remedies (also used by `plan --offline`)."""
    chosen = plan.chosen
    return {
        "proposed": {
            "chunked_prefill_size": plan.proposed.chunked_prefill_size,
            "expandable_segments": plan.proposed.is_expandable,
        },
        "margin": plan.margin,
        "rows": [
            {
                "mem_fraction_static": r.fraction,
                "max_total_num_tokens": r.prediction.tokens,
                "viable": r.prediction.is_viable,
                "capped": r.prediction.is_capped,
                "max_req_input_len": r.prediction.max_req_input_len,
                "headroom_bytes": r.prediction.headroom_bytes,
                "headroom_gib": round(r.prediction.headroom_bytes / GIB, 3),
                "usable_bytes": r.usable_bytes,
                "fits_current": _fit(r.current),
                "fits_proposed": _fit(r.proposed),
                "current": r.is_current,
                "chosen": r.is_chosen,
            }
            for r in plan.rows
        ],
        "choice": None
        if chosen is None
        else {
            "mem_fraction_static": chosen.fraction,
            "chunked_prefill_size": plan.proposed.chunked_prefill_size,
            "alloc_conf": EXPANDABLE if plan.proposed.is_expandable else None,
            "max_total_num_tokens": chosen.prediction.tokens,
            "max_req_input_len": chosen.prediction.max_req_input_len,
            "meets_target": plan.meets_target,
        },
        "target_tokens": plan.target_tokens,
        "target_fraction": plan.target_fraction,
        "shortfall_tokens": plan.shortfall_tokens,
        "short_bytes": plan.short_bytes,
        "remedies": [{"flag": r.flag, "value": r.value, "reason": r.reason} for r in plan.remedies],
        "reasons": list(plan.reasons),
        "warnings": list(plan.warnings),
    }


OFFLINE_KEYS = ("targets", "gpu_mem_gib", "free_after_weights_gib", "cell_bytes", "page_size", "target_tokens")


def offline_plan(
    *,
    targets: Sequence[str] = (),
    gpu_mem_gib: float | None,
    free_after_weights_gib: float | None,
    cell_bytes: float | None,
    page_size: int = 1,
    mem_fraction_static: float | None = None,
    target_tokens: int | None = None,
    max_total_tokens: int | None = None,
    context_length: int | None = None,
) -> dict[str, Any]:
    """`plan --offline`: the pool and headroom per fraction from numbers given (no spike, so no choice)."""
    if targets:
        raise ConfigError(f"--offline plans without a host: drop {' '.join(targets)}")
    if gpu_mem_gib is None or free_after_weights_gib is None or cell_bytes is None:
        raise ConfigError("--offline needs --gpu-mem-gib, --free-after-weights-gib and --cell-bytes")
    if not 0 < free_after_weights_gib < gpu_mem_gib:
        raise ConfigError("--free-after-weights-gib must be above 0 and below --gpu-mem-gib")
    if cell_bytes <= 0 or page_size < 1:
        raise ConfigError("--cell-bytes must be positive and --page-size at least 1")
    model = offline_model(
        gpu_mem_gib=gpu_mem_gib,
        free_after_weights_gib=free_after_weights_gib,
        cell_bytes=cell_bytes,
        page_size=page_size,
        max_total_tokens=max_total_tokens,
        context_len=context_length,
    )
    centre = mem_fraction_static
    if centre is None:
        reach = model.fraction_for_tokens(target_tokens) if target_tokens else None
        centre = round(min(0.95, max(model.min_viable_fraction() + 0.03, reach or 0.9)), 2)
    if not 0 < centre < 1:
        raise ConfigError(f"--mem-fraction-static {centre} must be between 0 and 1")
    chosen = choose(model, None, centre=centre, current=Knobs(), proposed=Knobs(), target_tokens=target_tokens)
    doc = {"model": model_document(model), "current": {}, **choice_document(chosen)}
    for row in doc["rows"]:
        row["current"] = False  # no server runs: the table is only centred on the target
    return doc


class SglangPlan:
    """sglang's planner (host/plan/planner.py): the journal, ``/server_info`` and the unit's settings; its own
    floor is in the plan, so a plain recipe's step has nothing more against it here."""

    def plan(
        self,
        transport: Transport,
        found: ProbeResult,
        sources: UnitSources,
        options: RunOptions,
        budget: BudgetOptions,
        host: str,
    ) -> tuple[HostBudget, dict[str, Any]]:
        planned = plan_budget(read_budget_evidence(transport, found, sources, options), budget, host)
        return planned, plan_document(planned)

    def choose(
        self, planned: HostBudget, desired: DesiredState, *, allow_raise: bool
    ) -> tuple[DesiredState, list[str]]:
        return auto_desired(planned, desired, allow_raise=allow_raise)

    def recipe_refusal(
        self, transport: Transport, found: ProbeResult, after: str, options: RunOptions, host: str
    ) -> str | None:
        return None

    def owns_journal(self, messages: list[str]) -> bool:
        return bool(parse_startup(messages).server_args)

    def plan_saved(
        self, saved: SavedJournal, messages: list[str], unit: UnitSources | None, budget: BudgetOptions, host: str
    ) -> SavedPlan:
        settings = read_settings(unit) if unit is not None else None
        startup, tail = saved.plan_lines()
        evidence = evidence_from(
            [mask_secrets(m) for m in tail],
            None,
            settings or UnitSettings(None, None, None),
            startup_lines=[mask_secrets(m) for m in startup],
        )
        planned = plan_budget(evidence, budget, host)
        where = unit.fragment.path if unit is not None else None
        label, said = settings_note(settings, bool(evidence.startup.server_args), where)
        return SavedPlan(planned, plan_document(planned), label, said, PLAN_ABSENT)


SGLANG_PLAN = SglangPlan()


@dataclass(frozen=True)
class SavedPlan:
    """A saved journal's plan (``plan --journal``): the plan and its document, where the settings came from
    (``unit_file``, ``journal`` or None), the note that says so, and what a live host would have added."""

    planned: HostBudget
    document: dict[str, Any]
    settings: str | None
    said: str
    absent: tuple[str, ...]


def settings_note(unit: UnitSettings | None, has_server_args: bool, unit_file: str | None) -> tuple[str | None, str]:
    """Where a saved journal's settings came from (``source.settings``) and the note that says so."""
    if unit is not None:
        return "unit_file", f"settings from {unit_file}"
    if has_server_args:
        return "journal", "no --unit-file: the settings are those the server logged (server_args)"
    return None, "no --unit-file and no server_args in the journal: the unit's settings are unknown"
