"""`plan` and `oom --auto` where sglang does not run the fraction as written (core/engines/sglang/resolved.py):
post-capture KV sizing (no prediction offered) and the aiter factor (named; `--auto` writes the fraction that
sglang then scales to the chosen one)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from remediate.core.capacity.headroom import Spike
from remediate.core.startup import ServerSettings
from remediate.core.unitfile.edit import DesiredState, UnitSettings
from remediate.host.common.options import BudgetOptions
from remediate.host.plan.budget import auto_desired, evidence_from, plan_budget, plan_document
from tests.support.journals import MIB
from tests.support.journals import standin_journal as journal

CRASH = "standin-incident-crash-0.94.journal"
# sglang 0.5.23 model_executor/model_runner_components/kv_pool_runtime.py compute_post_capture_kv_resize
POST_CAPTURE_LINE = (
    "[2026-12-06 02:00:08 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 201230, "
    "KV size: 13.82 GB, avail mem=4.21 GB"
)


def test_post_capture_in_the_unit_means_no_prediction() -> None:
    ev = evidence_from(
        journal(CRASH), None, UnitSettings("0.94", None, None), env={"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"}
    )
    planned = plan_budget(ev, BudgetOptions(), "gpu-01")
    assert planned.model is None and planned.plan is None
    document = plan_document(planned)
    assert document["rows"] == [] and document["choice"] is None
    assert any("after CUDA-graph capture" in n and "does not apply" in n for n in document["notes"])
    desired, notes = auto_desired(planned, DesiredState())
    assert desired == DesiredState() and "plain recipe" in notes[0]


def test_post_capture_seen_in_the_journal_means_no_prediction_either() -> None:
    ev = evidence_from([*journal(CRASH), POST_CAPTURE_LINE], None, UnitSettings("0.94", None, None))
    assert ev.is_post_capture and plan_budget(ev, BudgetOptions(), "gpu-01").plan is None


def test_the_aiter_factor_is_named_and_auto_writes_the_unscaled_fraction() -> None:
    # The server (ROCm, aiter) reports 0.94 * 0.85 for the unit's 0.94: sglang 0.5.23 attention_hook.py.
    base = evidence_from(journal(CRASH), None, UnitSettings("0.94", None, None))
    info = ServerSettings(mem_fraction_static=0.94 * 0.85, attention_backend="aiter", context_length=131072)
    ev = evidence_from(journal(CRASH), info, UnitSettings("0.94", None, None))
    assert ev.scale == Decimal("0.85") and ev.resolution_note is not None
    assert base.scale is None and base.resolution_note is None  # no report of the backend: nothing assumed
    spike = Spike(8 * 1024 * MIB, 4096, int(666.44 * MIB), int(358.40 * MIB), fraction=0.94)
    planned = plan_budget(replace(ev, spike=spike), BudgetOptions(), "gpu-01")
    assert any("aiter" in n and "divided by 0.85" in n for n in planned.notes)
    assert planned.plan is not None and planned.plan.chosen is not None
    chosen = Decimal(f"{planned.plan.chosen.fraction:.4f}").normalize()
    desired, notes = auto_desired(planned, DesiredState(), allow_raise=True)
    assert desired.mem_fraction_static == (chosen / Decimal("0.85")).quantize(Decimal("0.0001")).normalize()
    assert any("which sglang runs as" in n for n in notes)
