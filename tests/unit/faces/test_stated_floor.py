"""sglang 0.5.23's own floor ("Raise --mem-fraction-static above Y"), held by `plan` and `oom --auto`.

The text is sglang 0.5.23's mem_cache/kv_cache_configurator.py ``_profile_available_bytes`` (a ValueError the
scheduler logs as "Scheduler hit an exception"); its numbers are the stand-in's Kimi K2.6 start
(tests/data/budget_logs: 91.60 GB free before the weights, 19.17 GB after): Z = 1 − 19.17/91.60 = 0.7907,
Y = ceil(Z·1000)/1000 = 0.791.
"""

from __future__ import annotations

from dataclasses import replace

from remediate.core.capacity.floor import StatedFloor, hold_stated_floor
from remediate.core.capacity.headroom import BudgetPlan, Knobs, Row, Spike
from remediate.core.capacity.pool import offline_model
from remediate.core.unitfile.edit import DesiredState, UnitSettings
from remediate.host.common.options import BudgetOptions
from remediate.host.plan.budget import auto_desired, evidence_from, plan_budget, plan_document
from tests.support.journals import MIB
from tests.support.journals import standin_journal as journal

FAILED_START = [
    "[2026-12-01 10:00:01] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.6', mem_fraction_static=0.75, "
    "tp_size=8, chunked_prefill_size=-1)",
    "[2026-12-01 10:00:01 TP0] Load weight begin. avail mem=91.60 GB",
    "[2026-12-01 10:00:40 TP0] Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, "
    "avail mem=19.17 GB, mem usage=72.43 GB.",
    "[2026-12-01 10:00:41 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/mem_cache/kv_cache_configurator.py", '
    "line 3049, in _profile_available_bytes",
    "    raise ValueError(",
    "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.75. Raise "
    "--mem-fraction-static above 0.791 (minimum viable = 1 - available/pre = 0.7907). If using speculative "
    "decoding, draft weights are now counted.",
]


def _evidence(spike: Spike | None):  # type: ignore[no-untyped-def]
    lines = [*journal("standin-incident-crash-0.94.journal"), *FAILED_START]
    ev = evidence_from(lines, None, UnitSettings("0.75", None, None))
    assert ev.floor is not None and (ev.floor.above, ev.floor.minimum, ev.floor.failed_at) == (0.791, 0.7907, 0.75)
    return replace(ev, spike=spike, spike_note=None if spike else "no runtime CUDA OOM in the journal")


def test_plans_lowest_row_is_sglangs_stated_floor() -> None:
    planned = plan_budget(_evidence(None), BudgetOptions(), "gpu-01")
    rows = plan_document(planned)["rows"]
    assert rows and rows[-1]["mem_fraction_static"] == 0.791
    assert all(r["mem_fraction_static"] >= 0.791 for r in rows)
    assert planned.plan is not None and any("must be above 0.791 (minimum viable 0.7907)" in r
                                            for r in planned.plan.reasons)  # fmt: skip


def test_auto_never_chooses_below_the_floor_even_without_a_plan() -> None:
    """No runtime OOM to size against: not the plain recipe's step down from 0.75 (which cannot start), but the
    first step above Y, as `diagnose` recommends."""
    planned = plan_budget(_evidence(None), BudgetOptions(), "gpu-01")
    desired, notes = auto_desired(planned, DesiredState())
    assert str(desired.mem_fraction_static) == "0.8"
    assert "must be above 0.791" in notes[0] and "plain recipe" not in notes[0]


def test_auto_never_keeps_a_failed_fraction_below_the_floor() -> None:
    """`oom --auto` keeps the fraction that crashed as a ceiling (no --allow-raise): not where that fraction is
    below sglang's floor (it cannot start at all); the plan's own choice goes through, said in a note."""
    spike = Spike(8 * 1024 * MIB, 4096, int(666.44 * MIB), int(358.40 * MIB), fraction=0.94)
    planned = plan_budget(_evidence(spike), BudgetOptions(), "gpu-01")
    assert planned.plan is not None and planned.plan.chosen is not None and planned.plan.chosen.fraction == 0.85
    failed = replace(planned, evidence=replace(planned.evidence, spike=replace(spike, fraction=0.75)))
    desired, notes = auto_desired(failed, DesiredState())
    assert str(desired.mem_fraction_static) == "0.85", notes
    assert notes[0] == (
        "--auto: sglang's own startup line says --mem-fraction-static must be above 0.791 (minimum viable "
        "0.7907): above the fraction that failed, without --allow-raise"
    )


def test_a_choice_below_the_floor_is_moved_up_to_the_first_step_above_it() -> None:
    """The model's own estimate of the minimum (0.70 here) can be below sglang's measured one (a draft's weights
    counted, a multimodal reservation): the choice is held at the first 0.01 step above Y, with a warning."""
    model = offline_model(gpu_mem_gib=80.0, free_after_weights_gib=24.0, cell_bytes=70_000.0)
    rows = tuple(Row(model.predict(f), model.usable_bytes(f), None, None, is_chosen=f == 0.76) for f in (0.78, 0.76))
    plan = BudgetPlan(rows, rows[1], Knobs(4096, True), 0.10)
    floor = StatedFloor(above=0.791, minimum=0.7907, failed_at=0.75, line="ValueError: …")
    held = hold_stated_floor(plan, model, floor)
    assert [r.fraction for r in held.rows] == [0.8, 0.791]
    assert held.chosen is not None and held.chosen.fraction == 0.8 and held.chosen.is_chosen
    assert held.warnings[-1].startswith("the headroom wants --mem-fraction-static 0.76, but sglang's own startup")
    assert hold_stated_floor(plan, model, None) is plan
