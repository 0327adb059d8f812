"""Golden cases for the crash-evidence parser and the advisor (tests/data/diagnosis_cases/<name>/).

Each case: ``journal.txt`` (journalctl output, oldest first), optional ``show.txt`` (``systemctl show``
key=value lines) and ``settings.yaml`` (the unit's current knobs), and ``expected.yaml``: the findings in
order (every field listed must match), optional run facts, and the recommendation (fields listed must
match; ``reasons_contain`` are substrings of the reasons).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.core.diagnosis import KINDS, AdvisorInput, advise, parse_journal

CASES = Path(__file__).resolve().parents[3] / "data" / "diagnosis_cases"
NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


def load(name: str) -> tuple[list[str], dict[str, str], AdvisorInput, dict[str, Any]]:
    d = CASES / name
    lines = (d / "journal.txt").read_text().splitlines()
    show: dict[str, str] = {}
    if (d / "show.txt").exists():
        show = dict(line.split("=", 1) for line in (d / "show.txt").read_text().splitlines() if "=" in line)
    settings = AdvisorInput()
    if (d / "settings.yaml").exists():
        settings = AdvisorInput(**yaml.safe_load((d / "settings.yaml").read_text()))
    return lines, show, settings, yaml.safe_load((d / "expected.yaml").read_text())


def test_enough_cases_cover_every_kind_and_torch_format() -> None:
    assert len(NAMES) >= 25
    kinds: set[str] = set()
    formats: set[str] = set()
    for name in NAMES:
        for f in load(name)[3]["findings"]:
            kinds.add(f["kind"])
            formats.add(f.get("torch_format", ""))
    assert kinds == set(KINDS)
    assert {"old", "2.1", "2.2+", "new"} <= formats


@pytest.mark.parametrize("name", NAMES)
def test_findings(name: str) -> None:
    lines, show, _, expected = load(name)
    diagnosis = parse_journal(lines, show)
    got = [f.to_dict() for f in diagnosis.findings]
    assert [f["kind"] for f in got] == [f["kind"] for f in expected["findings"]], name
    for want, have in zip(expected["findings"], got, strict=True):
        for key, value in want.items():
            assert have.get(key) == value, (name, want["kind"], key, have.get(key), value)
        assert have["evidence"] and have["line"] in have["evidence"]
        assert all(line in "\n".join(lines) for line in have["evidence"])
    if "runs" in expected:
        assert len(diagnosis.runs) == expected["runs"]
    for key in ("is_stale", "latest_failure_run"):
        if key in expected:
            assert getattr(diagnosis, key) == expected[key], key
    for key, value in expected.get("facts", {}).items():
        assert getattr(diagnosis.facts, key) == value, key


@pytest.mark.parametrize("name", NAMES)
def test_recommendation(name: str) -> None:
    lines, show, settings, expected = load(name)
    rec = advise(parse_journal(lines, show), settings).to_dict()
    want = dict(expected["recommendation"])
    reasons = "\n".join(rec["reasons"])
    for part in want.pop("reasons_contain", []):
        assert part in reasons, (name, part, rec["reasons"])
    for key, value in want.items():
        assert rec[key] == value, (name, key, rec[key], value, rec["reasons"])
