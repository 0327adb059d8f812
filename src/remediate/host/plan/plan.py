"""`remediate plan` on one host (read-only, no lock) and the `oom --auto` step that runs before the edit."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from remediate.core.probe import ProbeResult
from remediate.core.unitfile.edit import DesiredState, UnitEdit
from remediate.core.unitfile.sources import UnitSources
from remediate.errors import RefusedError
from remediate.host.common.options import BudgetOptions, RunOptions
from remediate.host.common.outcome import must_refuse
from remediate.host.common.probe import engine_of, run_read_only
from remediate.host.plan.budget import HostBudget
from remediate.host.plan.planner import plan_engine
from remediate.models import HostResult
from remediate.transport.base import Transport


def plan_host(
    transport: Transport,
    options: RunOptions,
    budget: BudgetOptions,
    *,
    label: str | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """Read the host's evidence and plan the fraction; changes nothing (outcome ``unchanged``)."""

    def body(found: ProbeResult, sources: UnitSources, result: HostResult) -> None:
        planned, document = plan_engine(engine_of(found)).plan(transport, found, sources, options, budget, result.host)
        put_plan(result, planned, document, budget)

    return run_read_only(transport, options, body, label=label, now=now)


def put_plan(
    result: HostResult, planned: HostBudget, document: dict[str, Any], budget: BudgetOptions, notes: Sequence[str] = ()
) -> None:
    """A read-only plan into ``result`` (live, vLLM's, a saved journal's alike): the document, the pool now, the
    target, ``notes`` then the plan's own, its warnings."""
    result.outcome = "unchanged"  # read-only
    result.plan = document
    result.max_total_num_tokens = document["current"]["max_total_num_tokens"]
    result.target_tokens = budget.target_tokens
    result.notes.extend([*notes, *planned.notes])
    if planned.plan is not None:
        result.warnings.extend(planned.plan.warnings)


def auto_step(
    transport: Transport, found: ProbeResult, sources: UnitSources, options: RunOptions, result: HostResult
) -> DesiredState:
    """`oom --auto`: plan from this host's evidence; the plan goes into the result, the choice into the edit."""
    assert options.auto is not None
    engine = plan_engine(engine_of(found))
    planned, document = engine.plan(transport, found, sources, options, options.auto, result.host)
    result.plan = document
    desired, notes = engine.choose(planned, options.desired, allow_raise=options.auto.allow_raise)
    result.notes.extend(notes)
    if planned.plan is not None:
        result.warnings.extend(planned.plan.warnings)
    return desired


def floor_step(
    transport: Transport, found: ProbeResult, plan: UnitEdit, options: RunOptions, result: HostResult
) -> None:
    """`oom` without --auto: a fraction (the recipe's step, or one given by hand) the engine says would not
    start (vLLM: below the lowest at which one ``max_model_len`` request still fits) is refused before anything
    is written (--force: a warning; --dry-run: says a real run refuses). Nothing known against it: nothing said."""
    if options.auto is not None:
        return
    after = plan.after.mem_fraction_static
    if after is None or after == plan.before.mem_fraction_static:
        return
    reason = plan_engine(engine_of(found)).recipe_refusal(transport, found, after, options, result.host)
    if reason is None:
        return
    if must_refuse(result, reason, force=options.force, dry_run=options.dry_run):
        raise RefusedError(result.host, f"refusing the OOM recipe: {reason}; nothing was changed (--force)")
