"""Calibration records: one JSON line per healthy start, parsed tolerantly."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.capacity.observation import Observation, matching, observation_from, parse_observations
from remediate.core.startup import StartupNumbers


def record(**changes: object) -> Observation:
    base = observation_from(
        host="gpu-01",
        model_path="moonshotai/Kimi-K2.6",
        tp_size=8,
        fraction=0.93,
        tokens=195011,
        startup=StartupNumbers(free0_gib=91.6, free1_gib=19.17, kv_tokens=195011, kv_gib=12.76),
        chunked_prefill_size=4096,
        alloc_conf="expandable_segments:True",
        command="oom",
        at="2026-12-01T09:06:33Z",
    )
    return Observation(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_round_trip() -> None:
    obs = record()
    line = obs.to_json()
    assert "\n" not in line and json.loads(line)["schema"] == 1
    assert parse_observations([line]) == [obs]
    assert obs.measured().fraction == 0.93 and obs.measured().tokens == 195011
    assert obs.measured().source == "oom 2026-12-01T09:06:33Z"


def test_damaged_lines_are_skipped() -> None:
    good = record().to_json()
    bad = [
        "",
        "not json",
        "[1, 2]",
        json.dumps({"schema": 2, "host": "x"}),
        good.replace('"tokens":195011', '"tokens":"195011"'),
        good.replace('"fraction":0.93', '"fraction":1.5'),
        good.replace('"tp_size":8', '"tp_size":true'),
        json.dumps({"schema": 1, "host": "gpu-01", "fraction": 0.9}),
    ]
    assert parse_observations([*bad, good]) == [record()]


def test_matching_same_host_model_tp() -> None:
    records = [
        record(),
        record(host="gpu-02"),
        record(model_path="other"),
        record(tp_size=4),
        record(fraction=0.94, tokens=209007, tp_size=None),
    ]
    found = matching(records, "gpu-01", "moonshotai/Kimi-K2.6", 8)
    assert [(m.fraction, m.tokens) for m in found] == [(0.93, 195011), (0.94, 209007)]


@given(st.lists(st.text(max_size=80), max_size=10))
@settings(max_examples=100, deadline=None)
def test_never_raises(lines: list[str]) -> None:
    parse_observations(lines)
