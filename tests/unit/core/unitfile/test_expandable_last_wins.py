"""One reading of ``PYTORCH_CUDA_ALLOC_CONF``'s expandable segments (core/unitfile/alloc.py) for diagnose and
plan: torch parses the list left to right and a later key overrides an earlier one (c10/cuda/
CUDAAllocatorConfig.cpp ``parseArgs``), so the last ``expandable_segments`` wins. Diagnose used to say "on"
when any item was ``True``; plan said "off"."""

from __future__ import annotations

import pytest

from remediate.core.diagnosis import AdvisorInput, advise, parse_journal
from remediate.core.unitfile.alloc import EXPANDABLE, has_expandable
from remediate.core.unitfile.edit import UnitSettings
from remediate.host.plan.budget import evidence_from

ON_THEN_OFF = "expandable_segments:True,expandable_segments:False"
J = "Dec 01 08:07:01 gpu-01 python3[4711]: "
CRASH = [
    f"{J}[2026-12-01 08:07:00 TP0] Prefill batch. #new-seq: 1, #new-token: 30000, #cached-token: 0, "
    "token usage: 0.40, #running-req: 0, #queue-req: 0,",
    f"{J}[2026-12-01 08:07:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    f"{J}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
    "1.50 GiB is reserved by PyTorch but unallocated.",
]


@pytest.mark.parametrize(
    ("value", "on"),
    [
        (None, False),
        ("", False),
        (EXPANDABLE, True),
        ("max_split_size_mb:128, expandable_segments:True", True),
        ("expandable_segments:False", False),
        (ON_THEN_OFF, False),
        ("expandable_segments:False,expandable_segments:True", True),
        ("expandable_segments : True", True),  # torch's lexer drops spaces
        ("expandable_segments:true", False),  # torch accepts only True/False
    ],
)
def test_has_expandable(value: str | None, on: bool) -> None:
    assert has_expandable(value) is on


def test_diagnose_reads_the_last_key() -> None:
    crash = parse_journal(CRASH)
    on = advise(crash, AdvisorInput(mem_fraction_static=0.9, alloc_conf=EXPANDABLE))
    assert on.alloc_conf is None and f"{EXPANDABLE} is already set" in on.reasons
    off = advise(crash, AdvisorInput(mem_fraction_static=0.9, alloc_conf=ON_THEN_OFF))
    assert off.alloc_conf == EXPANDABLE and f"{EXPANDABLE} is already set" not in off.reasons


def test_plan_reads_the_last_key() -> None:
    unit = UnitSettings(mem_fraction_static="0.9", chunked_prefill_size=None, alloc_conf=ON_THEN_OFF)
    assert evidence_from(CRASH, None, unit).current.is_expandable is False
    on = UnitSettings(mem_fraction_static="0.9", chunked_prefill_size=None, alloc_conf=EXPANDABLE)
    assert evidence_from(CRASH, None, on).current.is_expandable is True
