"""PURE: sglang's own floor for the fraction, as its startup says it, held by a plan.

sglang 0.5.23 mem_cache/kv_cache_configurator.py ``_profile_available_bytes`` raises, when the loaded weights
leave nothing for the KV cache (``rest_memory <= 0``)::

    ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=X.
    Raise --mem-fraction-static above Y (minimum viable = 1 - available/pre = Z). ...

with ``Z = 1 - available/pre`` (the memory free after the weights over the memory free before them) and
``Y = ceil(Z·1000)/1000``. That is measured, not estimated: below Y the server cannot start, whatever the model
of :mod:`remediate.core.capacity.pool` says, so a plan's rows stop at Y and its choice is never below it (the
first 0.01 step above Y, as ``diagnose`` recommends, where the headroom would want less).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from remediate.core.capacity.headroom import BudgetPlan, Row
from remediate.core.capacity.pool import BudgetModel
from remediate.core.diagnosis.advice import step_up
from remediate.core.diagnosis.findings import Finding


@dataclass(frozen=True)
class StatedFloor:
    """sglang's stated floor: "above" Y, the minimum viable Z, the fraction that failed, and the line."""

    above: float
    minimum: float | None
    failed_at: float | None
    line: str

    @property
    def lowest_choice(self) -> float:
        """The lowest fraction a plan may choose: the first 0.01 step above Y (``diagnose``'s recommendation)."""
        return step_up(self.above)

    @property
    def lowest_decimal(self) -> Decimal:
        return Decimal(f"{self.lowest_choice:.4f}").normalize()

    def is_above(self, fraction: float | None) -> bool:
        """Whether ``fraction`` (the one that failed) is below the lowest choice: it cannot start at all."""
        return fraction is not None and fraction < self.lowest_choice - 1e-9

    def auto_note(self) -> str:
        """`oom --auto` without a plan: sglang said where it starts, so that, never the recipe's step down."""
        return f"--auto: no plan from evidence, but {self.describe()}: --mem-fraction-static {self.lowest_decimal}"

    def describe(self) -> str:
        viable = f" (minimum viable {self.minimum:g})" if self.minimum is not None else ""
        return f"sglang's own startup line says --mem-fraction-static must be above {self.above:g}{viable}"


def stated_floor(findings: Sequence[Finding]) -> StatedFloor | None:
    """The newest "Raise --mem-fraction-static above Y" among ``findings`` (None: sglang stated none)."""
    for f in reversed(findings):
        if f.kind == "kv_pool_too_small_at_startup" and f.suggested_fraction is not None:
            return StatedFloor(f.suggested_fraction, f.minimum_fraction, f.mem_fraction_static, f.line)
    return None


def hold_stated_floor(plan: BudgetPlan, model: BudgetModel, floor: StatedFloor | None) -> BudgetPlan:
    """Rows below Y dropped, Y the lowest row; a choice below the lowest allowed one moved up to it, said in a
    warning. A plan without a choice keeps none (the headroom has nothing to size against)."""
    if floor is None:
        return plan
    lowest = floor.lowest_choice
    rows = [r for r in plan.rows if r.fraction >= floor.above - 1e-9]
    for fraction in (floor.above, lowest):
        if not any(abs(r.fraction - fraction) < 1e-9 for r in rows):
            prediction = model.predict(fraction)
            usable = model.usable_bytes(fraction) if prediction.is_viable else None
            rows.append(Row(prediction, usable, None, None, is_current=False))
    chosen = plan.chosen
    warnings = list(plan.warnings)
    if chosen is not None and chosen.fraction < lowest - 1e-9:
        warnings.append(
            f"the headroom wants --mem-fraction-static {chosen.fraction:g}, but {floor.describe()}: kept {lowest:g}"
        )
        chosen = next(r for r in rows if abs(r.fraction - lowest) < 1e-9)
    rows = sorted((replace(r, is_chosen=chosen is not None and r is chosen) for r in rows),
                  key=lambda r: r.fraction, reverse=True)  # fmt: skip
    held = next((r for r in rows if r.is_chosen), None)
    meets = plan.meets_target
    if held is not None and plan.target_tokens is not None:
        meets = held.prediction.tokens >= plan.target_tokens
    reasons = (*plan.reasons, f"{floor.describe()}: no row below it")
    return replace(plan, rows=tuple(rows), chosen=held, meets_target=meets, reasons=reasons, warnings=tuple(warnings))
