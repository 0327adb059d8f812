"""Golden tests over REAL torch CUDA OOM texts captured on an H200 (tests/data/torch_oom/).

Provenance: capture.py provoked each OOM with torch 2.11.0+cu130 (meta/env.torch.txt); the
``*.sglang-*.txt`` variants are logged through a synthetic sglang call chain (synth_sglang.py);
meta/*.meta.json hold the allocator state at the exception. expected.json was written from the texts
by make_expected.py (numbers read from the text: torch prints two decimals). We check every field it gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remediate.core.diagnosis import AdvisorInput, advise, parse_journal

FIXTURES = Path(__file__).resolve().parents[3] / "data" / "torch_oom"
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "expected.json").read_text())
FIELDS = (
    "tried_bytes",
    "total_bytes",
    "free_bytes",
    "allocated_bytes",
    "private_pools_bytes",
    "reserved_unallocated_bytes",
    "allowed_bytes",
    "gpu",
)


def test_every_captured_text_has_an_expectation() -> None:
    texts = {p.name for p in FIXTURES.glob("*.txt") if not p.name.startswith("nvidia-smi")}
    assert texts == set(EXPECTED)
    assert len(texts) >= 20


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_text(name: str) -> None:
    want = EXPECTED[name]
    diagnosis = parse_journal((FIXTURES / name).read_text().splitlines())
    kinds = [f.kind for f in diagnosis.findings]
    assert kinds == [want["kind"]], (name, kinds)
    got = diagnosis.findings[0]
    for field in FIELDS:
        if field in want:
            assert getattr(got, field) == want[field], (name, field, getattr(got, field), want[field])
    if "processes" in want:
        procs = [{k: v for k, v in p.items() if k != "self_pid_actual"} for p in want["processes"]]
        assert sorted([p.to_dict() for p in got.processes], key=str) == sorted(procs, key=str), name
    assert got.phase == want["phase"], (name, got.phase)
    if want.get("prefill_new_tokens") is not None:
        assert got.prefill_tokens == want["prefill_new_tokens"]
    if want.get("synthetic_sglang_wrap"):
        assert got.rank == 0
        assert any("hit an exception" in line for line in got.evidence)


def test_real_neighbour_blocks_and_container_view_does_not() -> None:
    other = parse_journal((FIXTURES / "other_process.sglang-overlap.txt").read_text().splitlines())
    rec = advise(other, AdvisorInput(mem_fraction_static=0.9))
    assert rec.blocking
    assert "process 829 holds 100.51 GiB on GPU 0" in rec.reasons[0]


def test_real_expandable_already_on_is_not_recommended_again() -> None:
    text = (FIXTURES / "expandable_cuda_conf.sglang-decode.txt").read_text().splitlines()
    rec = advise(parse_journal(text), AdvisorInput(mem_fraction_static=0.9, alloc_conf="expandable_segments:True"))
    assert rec.alloc_conf is None
    assert rec.chunked_prefill_size is None  # a decode OOM: chunked prefill does not bound it
    assert rec.mem_fraction_static is not None and rec.mem_fraction_static <= 0.9
