"""`remediate plan` on one host (read-only, no lock) and the `oom --auto` step that runs before the edit."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from remediate.core.engines import VLLM
from remediate.core.engines.vllm.advice import kv_bytes_refusal
from remediate.core.probe import ProbeResult
from remediate.core.unitfile.edit import DesiredState, UnitEdit
from remediate.core.unitfile.sources import UnitSources
from remediate.errors import ConfigError, RefusedError
from remediate.host.common.options import BudgetOptions, RunOptions
from remediate.host.common.outcome import must_refuse
from remediate.host.common.probe import engine_of, run_read_only
from remediate.host.plan.budget import HostBudget, auto_desired, plan_budget, plan_document, read_budget_evidence
from remediate.host.plan.budget_vllm import (
    auto_desired_vllm,
    plan_vllm,
    read_vllm_evidence,
    recipe_warning,
    vllm_plan_document,
)
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
        if engine_of(found) is VLLM:
            _plan_vllm(transport, found, options, budget, result)
            return
        planned = plan_budget(read_budget_evidence(transport, found, sources, options), budget, result.host)
        put_plan(result, planned, plan_document(planned), budget)

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
    if engine_of(found) is VLLM:
        evidence = read_vllm_evidence(transport, found, options)
        budget = plan_vllm(evidence, options.auto, result.host)
        result.plan = vllm_plan_document(budget, evidence)
        desired, notes = auto_desired_vllm(budget, options.desired, allow_raise=options.auto.allow_raise)
        result.notes.extend(notes)
        if budget.plan is not None:
            result.warnings.extend(budget.plan.warnings)
        return desired
    planned = plan_budget(read_budget_evidence(transport, found, sources, options), options.auto, result.host)
    result.plan = plan_document(planned)
    desired, notes = auto_desired(planned, options.desired, allow_raise=options.auto.allow_raise)
    result.notes.extend(notes)
    if planned.plan is not None:
        result.warnings.extend(planned.plan.warnings)
    return desired


def floor_step(
    transport: Transport, found: ProbeResult, plan: UnitEdit, options: RunOptions, result: HostResult
) -> None:
    """`oom` on a vLLM unit without --auto: a utilization (the recipe's step, or one given by hand) below the
    lowest at which one ``max_model_len`` request still fits would not start (vLLM's
    ``kv_cache_utils.check_enough_kv_cache_memory``), so it is refused before anything is written (--force:
    a warning; --dry-run: says a real run refuses). No model from the evidence: nothing said."""
    if options.auto is not None or engine_of(found) is not VLLM:
        return
    after = plan.after.mem_fraction_static
    if after is None or after == plan.before.mem_fraction_static:
        return
    evidence = read_vllm_evidence(transport, found, options)
    if evidence.kv_bytes is not None:  # the start logged it (a --config file's): lowering the utilization is moot
        raise ConfigError(kv_bytes_refusal(evidence.kv_bytes), source=found.state.unit if found.state else None)
    reason = recipe_warning(plan_vllm(evidence, BudgetOptions(), result.host), evidence, float(after))
    if reason is None:
        return
    if must_refuse(result, reason, force=options.force, dry_run=options.dry_run):
        raise RefusedError(result.host, f"refusing the OOM recipe: {reason}; nothing was changed (--force)")


def _plan_vllm(
    transport: Transport, found: ProbeResult, options: RunOptions, budget: BudgetOptions, result: HostResult
) -> None:
    """`plan` on a vLLM unit: the same model and choice from vLLM's own evidence (host/plan/budget_vllm.py)."""
    evidence = read_vllm_evidence(transport, found, options)
    planned = plan_vllm(evidence, budget, result.host)
    put_plan(result, planned, vllm_plan_document(planned, evidence), budget)
