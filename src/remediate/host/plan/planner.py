"""The plan's side of the engine seam: what ``plan``, ``oom --auto`` and ``oom``'s recipe check ask of an engine.

A :class:`PlanEngine` reads the engine's own evidence and plans the pool over its fraction (sglang's in
budget.py, vLLM's in budget_vllm.py: the same core model, each engine's evidence and flags), picks the values
for ``oom --auto``, says why a plain recipe's step would not start, and plans a saved journal
(``plan --journal``). The registry is keyed by the engine's
name (core/engines/).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from remediate.core.engines import DEFAULT, ENGINES, SGLANG, VLLM, Engine
from remediate.core.journal import SavedJournal
from remediate.core.probe import ProbeResult
from remediate.core.unitfile.edit import DesiredState
from remediate.core.unitfile.sources import UnitSources
from remediate.host.common.options import BudgetOptions, RunOptions
from remediate.host.plan.budget import SGLANG_PLAN, HostBudget, SavedPlan
from remediate.host.plan.budget_vllm import VLLM_PLAN
from remediate.transport.base import Transport


class PlanEngine(Protocol):
    """One engine's capacity planner on a host."""

    def plan(
        self,
        transport: Transport,
        found: ProbeResult,
        sources: UnitSources,
        options: RunOptions,
        budget: BudgetOptions,
        host: str,
    ) -> tuple[HostBudget, dict[str, Any]]:
        """The host's evidence read and planned: the plan and its JSON document."""
        ...

    def choose(
        self, planned: HostBudget, desired: DesiredState, *, allow_raise: bool
    ) -> tuple[DesiredState, list[str]]:
        """``oom --auto``'s values from the plan (else the plain recipe's, said so) and the notes."""
        ...

    def recipe_refusal(
        self, transport: Transport, found: ProbeResult, after: str, options: RunOptions, host: str
    ) -> str | None:
        """Why the plain recipe's fraction ``after`` would not start (None: nothing known against it);
        ConfigError where no fraction can help."""
        ...

    def owns_journal(self, messages: list[str]) -> bool:
        """A saved journal without a unit file: its startup lines are this engine's."""
        ...

    def plan_saved(
        self, saved: SavedJournal, messages: list[str], unit: UnitSources | None, budget: BudgetOptions, host: str
    ) -> SavedPlan:
        """``plan --journal``: the saved messages (masked) planned as a live host's, with the local unit file."""
        ...


PLAN_ENGINES: Mapping[str, PlanEngine] = {SGLANG.name: SGLANG_PLAN, VLLM.name: VLLM_PLAN}


def plan_engine(engine: Engine) -> PlanEngine:
    """The engine's capacity planner."""
    return PLAN_ENGINES[engine.name]


def journal_engine(messages: list[str]) -> Engine:
    """The engine whose startup lines a saved journal holds (the default where no other one's are there)."""
    return next((e for e in ENGINES.values() if e is not DEFAULT and plan_engine(e).owns_journal(messages)), DEFAULT)
