"""The crash-evidence parser never raises: garbage, real lines cut anywhere, shuffled journals."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.diagnosis import AdvisorInput, advise, format_size, parse_journal, parse_size, parse_torch_oom

CASES = Path(__file__).resolve().parents[3] / "data" / "diagnosis_cases"
REAL = sorted({line for p in sorted(CASES.glob("*/journal.txt")) for line in p.read_text().splitlines()})
SHOW_KEYS = ("NRestarts", "Result", "ActiveState", "SubState", "MainPID")


def _check(lines: list[str], show: dict[str, str] | None = None) -> None:
    diagnosis = parse_journal(lines, show)
    for f in diagnosis.findings:
        assert f.line is not None
        f.to_dict()
    rec = advise(diagnosis, AdvisorInput(mem_fraction_static=0.9))
    rec.to_dict()
    diagnosis.to_dict()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=30), st.dictionaries(st.sampled_from(SHOW_KEYS), st.text(max_size=10)))
def test_garbage_never_raises(lines: list[str], show: dict[str, str]) -> None:
    _check(lines, show)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(REAL), st.integers(0, 2000)), min_size=1, max_size=40))
def test_real_lines_cut_at_random_points_never_raise(picks: list[tuple[str, int]]) -> None:
    _check([line[:cut] for line, cut in picks])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(CASES.glob("*/journal.txt"))), st.data())
def test_whole_cases_cut_and_dropped_never_raise(path: Path, data: st.DataObject) -> None:
    lines = path.read_text().splitlines()
    keep = data.draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    cut = data.draw(st.integers(0, 400))
    _check([line if k else line[:cut] for line, k in zip(lines, keep, strict=True)])


@given(st.integers(0, 1 << 45))
def test_format_then_parse_size_is_within_the_printed_precision(size: int) -> None:
    parsed = parse_size(format_size(size))
    assert parsed is not None
    assert abs(parsed - size) <= max(1, size // 200)


def test_sizes_are_exact_as_torch_prints_them() -> None:
    assert parse_size("896.00 MiB") == 939524096
    assert parse_size("1.40 GiB") == round(1.40 * (1 << 30))
    assert parse_size("0 bytes") == 0
    assert parse_size("512.50 KiB") == 524800
    assert parse_size("12 parsecs") is None


def test_unknown_text_has_no_finding() -> None:
    assert parse_torch_oom("all good") is None
    assert parse_journal(["hello", "", "[2026-12-01 08:00:00 TP0] Decode batch. #running-req: 1"]).findings == ()
