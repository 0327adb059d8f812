"""The spike model and the choice: the largest fraction whose headroom covers the diagnosed need."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.capacity.headroom import Knobs, Spike, choose, grid, overhead_gib
from remediate.core.capacity.pool import GIB, MIB, BudgetModel, model_from_server, offline_model
from remediate.core.startup import parse_startup

LOGS = Path(__file__).resolve().parents[3] / "data" / "budget_logs"
# The stand-in's incident crash (budget_logs/standin-incident-crash-0.94.journal): 896 MiB for a 32,768-token
# prefill, 666.44 MiB free, 358.40 MiB reserved but unallocated, at 0.94 without chunking or expandable segments.
INCIDENT = Spike(896 * MIB, 32768, int(666.44 * MIB), int(358.40 * MIB), fraction=0.94)
CRASHED = Knobs(chunked_prefill_size=-1, is_expandable=False)
RECIPE = Knobs(chunked_prefill_size=4096, is_expandable=True)


def incident_model() -> BudgetModel:
    built = model_from_server(parse_startup((LOGS / "standin-incident-crash-0.94.journal").read_text().splitlines()))
    assert isinstance(built, BudgetModel)
    return built


def test_spike_per_token_and_chunk() -> None:
    assert INCIDENT.per_token_bytes == 28 * 1024
    assert INCIDENT.spike_bytes(4096) == 112 * MIB
    assert INCIDENT.spike_bytes(-1) == INCIDENT.spike_bytes(None) == 896 * MIB
    assert INCIDENT.need_bytes(CRASHED) == 896 * MIB + int(358.40 * MIB)
    assert INCIDENT.need_bytes(RECIPE) == 112 * MIB
    unknown = Spike(896 * MIB, None, 0, 0)
    assert unknown.per_token_bytes is None and unknown.spike_bytes(4096) == 896 * MIB


def test_overhead_from_the_crash() -> None:
    m = incident_model()
    expected = 91.60 * 0.06 - (666.44 + 358.40) / 1024
    assert overhead_gib(m, INCIDENT) == pytest.approx(expected)
    assert overhead_gib(m, None) == pytest.approx(91.60 * 0.06 - 1.00)  # the capacity line


def test_incident_target_200k_keeps_094_with_chunking_and_expandable() -> None:
    """The question the incident left open: 0.94 + chunk 4096 + expandable keeps enough headroom."""
    plan = choose(incident_model(), INCIDENT, centre=0.94, current=CRASHED, proposed=RECIPE, target_tokens=200_000)
    assert plan.chosen is not None and plan.chosen.fraction == 0.94
    assert plan.chosen.prediction.tokens == 209007 and plan.meets_target is True
    by_fraction = {r.fraction: r for r in plan.rows}
    assert by_fraction[0.94].current is not None and not by_fraction[0.94].current.fits  # as it crashed
    assert by_fraction[0.95].proposed is not None and not by_fraction[0.95].proposed.fits  # 0.08 GiB usable
    assert by_fraction[0.94].is_current and by_fraction[0.94].is_chosen
    assert [r.fraction for r in plan.rows] == [0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.91]
    assert any("28.0 KiB per prefill token" in line for line in plan.reasons)
    assert not plan.warnings and plan.remedies == ()


def test_without_the_recipe_the_spike_needs_a_lower_fraction() -> None:
    plan = choose(incident_model(), INCIDENT, centre=0.94, current=CRASHED, proposed=CRASHED, target_tokens=200_000)
    assert plan.chosen is not None and plan.chosen.fraction == 0.93  # 1.96 GiB usable >= 1.22 GiB * 1.1
    assert plan.meets_target is False and plan.shortfall_tokens == 200_000 - plan.chosen.prediction.tokens
    assert plan.target_fraction == 0.94 and plan.short_bytes is not None and plan.short_bytes > 0
    assert any("cannot both be met" in w for w in plan.warnings)
    flags = {r.flag: r.value for r in plan.remedies}
    assert set(flags) == {"--chunked-prefill-size", "--max-running-requests"}
    assert flags["--chunked-prefill-size"] == 16384  # 448 MiB * 1.1 + 358 MiB fits in the 1.00 GiB at 0.94
    assert flags["--max-running-requests"] % 16 == 0 and flags["--max-running-requests"] < 2048


def test_target_out_of_reach_picks_stability_and_says_by_how_much() -> None:
    plan = choose(incident_model(), INCIDENT, centre=0.94, current=CRASHED, proposed=RECIPE, target_tokens=220_000)
    assert plan.chosen is not None and plan.chosen.fraction == 0.94
    assert plan.meets_target is False and plan.shortfall_tokens == 220_000 - 209007
    assert plan.target_fraction == 0.95
    assert any("−5.0%" in w or "-5.0%" in w for w in plan.warnings)
    assert any(r.flag == "--chunked-prefill-size" and r.value == 2048 for r in plan.remedies)


def test_margin_decides() -> None:
    m = incident_model()
    tight = choose(m, INCIDENT, centre=0.94, current=CRASHED, proposed=RECIPE, margin=9.0)  # 10x the need
    assert tight.chosen is not None and tight.chosen.fraction == 0.93
    assert tight.chosen.proposed is not None and tight.chosen.proposed.margin >= 9.0


def test_no_spike_no_choice() -> None:
    plan = choose(incident_model(), None, centre=0.94, current=CRASHED, proposed=RECIPE, target_tokens=200_000)
    assert plan.chosen is None and plan.meets_target is None
    assert plan.rows and all(r.current is None for r in plan.rows)
    assert any("no diagnosed runtime OOM" in r for r in plan.reasons)
    assert plan.target_fraction == 0.94


def test_nothing_fits() -> None:
    huge = Spike(80 * GIB, None, 0, 0, fraction=0.94)  # prefill size unknown: chunking not credited
    plan = choose(incident_model(), huge, centre=0.94, current=CRASHED, proposed=RECIPE, target_tokens=200_000)
    assert plan.chosen is None and any("no fraction keeps" in w for w in plan.warnings)


def test_offline_without_overhead_says_so() -> None:
    m = offline_model(gpu_mem_gib=80.0, free_after_weights_gib=60.0, cell_bytes=131072)
    spike = Spike(1 * GIB, 8192, 0, 0)  # no crash fraction: the fixed overhead is unknown
    plan = choose(m, spike, centre=0.9, current=CRASHED, proposed=RECIPE)
    assert plan.chosen is None and any("overhead" in r for r in plan.reasons)


def test_grid_runs_high_to_low_around_the_centre() -> None:
    m = incident_model()
    fractions = grid(0.871, m)
    assert fractions[0] == 0.981 and 0.871 in fractions and fractions == sorted(fractions, reverse=True)
    assert fractions[-1] <= m.min_viable_fraction()


@given(
    st.integers(1, 4 * 1024).map(lambda n: n * MIB),
    st.integers(1, 262144),
    st.integers(0, 2 * 1024).map(lambda n: n * MIB),
    st.floats(0.0, 1.0),
)
@settings(max_examples=150, deadline=None)
def test_the_chosen_fraction_is_the_largest_that_fits(tried: int, tokens: int, frag: int, margin: float) -> None:
    spike = Spike(tried, tokens, 256 * MIB, frag, fraction=0.94)
    plan = choose(incident_model(), spike, centre=0.94, current=CRASHED, proposed=RECIPE, margin=margin, span=60)
    fitting = [r.fraction for r in plan.rows if r.proposed is not None and r.proposed.fits]
    if plan.chosen is None:
        assert fitting == []
    else:
        assert plan.chosen.fraction == max(fitting)
        assert plan.chosen.proposed is not None
        assert plan.chosen.proposed.usable_bytes >= plan.chosen.proposed.need_bytes * (1 + margin)


def test_a_cap_below_one_page_gives_no_rows() -> None:
    m = offline_model(
        gpu_mem_gib=80.0, free_after_weights_gib=60.0, cell_bytes=131072, page_size=64, max_total_tokens=8
    )
    assert grid(0.9, m) == []
    plan = choose(m, INCIDENT, centre=0.9, current=CRASHED, proposed=RECIPE, target_tokens=1000)
    assert plan.rows == () and plan.chosen is None
