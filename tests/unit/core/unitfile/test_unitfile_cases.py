"""Golden cases from tests/data/unitfile_cases (layout in tests/data/unitfile_cases/README.md), each applied twice."""

from __future__ import annotations

import pytest

from remediate.core.unitfile.model import parse_unit, render_unit
from tests.support.unit_cases import CASES, Case, case_texts, check_golden_case, load_cases, read_text

ALL_CASES = load_cases()


def test_at_least_thirty_cases() -> None:
    assert len(ALL_CASES) >= 30


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_golden_case(case: Case) -> None:
    check_golden_case(case)


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_case_files_round_trip(case: Case) -> None:
    for text in case_texts(case.sources()).values():
        assert render_unit(parse_unit(text)) == text


def test_incident_example_matches_case() -> None:
    example = CASES.parents[2] / "examples" / "incident" / "sglang.service"
    assert read_text(example) == read_text(CASES / "incident" / "before.service")
