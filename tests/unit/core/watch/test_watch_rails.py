"""The watcher's rails, pure: policy validation, incident folding, the cap's count, the breaker, decide()."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediate.core.watch.decide import FleetView, breaker_crossing, breaker_trip, decide
from remediate.core.watch.incident import Crash, HostHistory, counted_fixes, fold, note_crash, note_fix, note_healthy
from remediate.core.watch.policy import Policy, parse_duration, parse_policy
from remediate.errors import ConfigError

H = 3600.0
OOM = ("cuda_oom_runtime",)
CALM = FleetView(watched=4)


def test_defaults() -> None:
    p = parse_policy(None)
    assert p.fixed_kinds == {"cuda_oom_runtime"} and p.how == "auto"
    assert (p.cooldown_s, p.cap_per_day, p.healthy_period_s, p.concurrency) == (H, 2, 6 * H, 1)
    assert (p.breaker_percentage, p.breaker_count, p.lookback_s, p.approval) == (50.0, None, H, False)


def test_full_policy() -> None:
    p = parse_policy(
        {
            "fix": {"kinds": ["cuda_oom_runtime", "cuda_oom_graph_capture"], "how": "recipe"},
            "cooldown": "30m",
            "cap_per_day": 3,
            "healthy_period": "2h",
            "concurrency": 2,
            "breaker": {"count": 5, "window": "10m"},
            "lookback": "90s",
            "approval": True,
        }
    )
    assert p.how == "recipe" and p.cooldown_s == 1800 and p.healthy_period_s == 2 * H
    assert p.breaker_count == 5 and p.breaker_percentage is None and p.breaker_window_s == 600
    assert p.lookback_s == 90 and p.approval and p.concurrency == 2


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"cooldwn": "1h"}, "line 3: unknown key 'cooldwn'"),
        ({"cooldown": "soon"}, "line 3: cooldown 'soon' is not a duration"),
        ({"cooldown": 0}, "must be > 0"),
        ({"cap_per_day": True}, "cap_per_day must be an integer"),
        ({"concurrency": 0}, "concurrency must be an integer ≥ 1"),
        ({"fix": {"kinds": ["made_up"]}}, "unknown kind 'made_up'"),
        ({"fix": {"kinds": ["kv_pool_too_small_at_startup"]}}, "never fixed automatically"),
        ({"fix": {"how": "yolo"}}, "fix.how must be auto or recipe"),
        ({"breaker": {"percentage": 100}}, "breaker.percentage must be in (0, 100)"),
        ({"breaker": {"window": "x"}}, "breaker.window 'x' is not a duration"),
        ({"approval": "yes"}, "approval must be true or false"),
        (["a"], "a policy is a mapping"),
    ],
)
def test_bad_policy_names_file_and_line(data: object, needle: str) -> None:
    lines = {"cooldwn": 3, "cooldown": 3}
    with pytest.raises(ConfigError) as err:
        parse_policy(data, source="watch.yaml", lines=lines)
    assert str(err.value).startswith("watch.yaml: ") and needle in str(err.value)


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15), ("5m", 300), ("1h", 3600), ("1d", 86400), ("250ms", 0.25), (7, 7)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_crash_loop_folds_into_one_incident() -> None:
    p = Policy()
    inc, new = fold(None, Crash("h2", "sglang.service", 100.0, "a", OOM), p, "i1")
    assert new
    for n, at in enumerate((130.0, 160.0, 190.0, 220.0), start=2):
        inc, new = fold(inc, Crash("h2", "sglang.service", at, str(n), ("crash_loop",)), p, f"i{n}")
        assert not new and inc.id == "i1" and inc.crashes == n
    assert inc.kinds == ("cuda_oom_runtime", "crash_loop")


def test_new_incident_after_quiet_closed_or_other_host() -> None:
    p = Policy()
    inc, _ = fold(None, Crash("h2", "u", 0.0, kinds=OOM), p, "i1")
    assert fold(inc, Crash("h2", "u", p.fold_window_s + 1, kinds=OOM), p, "i2")[1]
    assert fold(inc, Crash("h3", "u", 1.0, kinds=OOM), p, "i2")[1]
    closed = type(inc)(**{**inc.__dict__, "is_closed": True})
    assert fold(closed, Crash("h2", "u", 1.0, kinds=OOM), p, "i2")[1]


def test_cap_counts_a_day_and_resets_after_healthy_period() -> None:
    p = Policy()
    h = note_fix(note_fix(HostHistory(), 0.0), H)
    assert counted_fixes(h, 2 * H) == 2 and counted_fixes(h, 25 * H) == 1
    h = note_healthy(h, 2 * H)
    assert note_healthy(h, 3 * H).healthy_since == 2 * H  # the stretch keeps its start
    short = note_crash(h, 7 * H, p)  # healthy 5 h < 6 h: same count
    assert counted_fixes(short, 7 * H) == 2 and short.healthy_since is None
    long = note_crash(h, 8 * H, p)  # healthy 6 h: a new count
    assert counted_fixes(long, 8 * H) == 0


def test_breaker_more_than_half() -> None:
    p = Policy()
    two = FleetView(4, (("h1", 10.0), ("h2", 20.0), ("h2", 25.0)))
    assert breaker_trip(two, p) is None  # 2 of 4 is not more than 50 %
    three = FleetView(4, (("h1", 10.0), ("h2", 20.0), ("h3", 25.0)))
    assert "3 of 4 hosts crashed" in (breaker_trip(three, p) or "")
    assert breaker_trip(FleetView(1, (("h1", 10.0),)), p) is None  # one host alone is not fleet-wide
    assert breaker_trip(FleetView(2, (("h1", 10.0),)), p) is None
    counted = Policy(breaker_percentage=None, breaker_count=2)
    assert "more than 2" in (breaker_trip(three, counted) or "")


def test_breaker_counts_crashes_at_their_own_times() -> None:
    p = Policy(breaker_percentage=None, breaker_count=2, breaker_window_s=10.0)
    spread = FleetView(4, (("h1", 0.0), ("h2", 6.0), ("h3", 12.0)))  # never 3 hosts within 10 s
    assert breaker_crossing(spread, p) is None
    # Detected together (one round after a dead watcher), they are still 12 s apart: no trip ...
    burst = FleetView(4, (("h1", 100.0), ("h4", 7.0), ("h2", 104.0), ("h3", 109.5), ("h1", 101.0)))
    # ... while a burst detected over many rounds (a fix in flight) trips at its third host's crash time.
    assert breaker_crossing(burst, p) == (109.5, "3 hosts crashed within 10s (more than 2)")
    repeats = FleetView(4, (("h1", 100.0), ("h1", 101.0), ("h1", 102.0), ("h2", 103.0)))
    assert breaker_crossing(repeats, p) is None  # one host's crash loop is one host


def test_decide_acts_on_runtime_oom() -> None:
    assert decide(OOM, HostHistory(), CALM, Policy(), 0.0).verdict == "act"
    assert decide((*OOM, "crash_loop"), HostHistory(), CALM, Policy(), 0.0).verdict == "act"


@pytest.mark.parametrize(
    "kinds", [(), ("kv_pool_too_small_at_startup",), ("crash_loop",), ("something_new",), (*OOM, "cuda_error_oom")]
)
def test_decide_reports_what_policy_does_not_fix(kinds: tuple[str, ...]) -> None:
    assert decide(kinds, HostHistory(), CALM, Policy(), 0.0).verdict == "report"


def test_decide_rails_in_order() -> None:
    p = Policy()
    fixed_once = note_fix(HostHistory(), 0.0)
    assert "cooling down" in decide(OOM, fixed_once, CALM, p, 60.0).reason
    assert decide(OOM, fixed_once, CALM, p, H).verdict == "act"
    capped = note_fix(fixed_once, 2 * H)
    assert decide(OOM, capped, CALM, p, 4 * H).verdict == "needs_human"
    assert decide(OOM, HostHistory(is_needs_human=True), CALM, p, 0.0).verdict == "needs_human"
    assert decide(OOM, HostHistory(), FleetView(4, in_flight=1), p, 0.0).verdict == "wait"
    assert decide(OOM, HostHistory(), FleetView(4, is_paused=True), p, 0.0).reason.startswith("paused")
    assert decide(OOM, HostHistory(), FleetView(4, breaker_reason="x"), p, 0.0).verdict == "breaker_open"
    ask = Policy(approval=True)
    assert decide(OOM, HostHistory(), CALM, ask, 0.0).verdict == "wait_approval"
    assert decide(OOM, HostHistory(), CALM, ask, 0.0, approved=True).verdict == "act"


kinds_st = st.lists(
    st.sampled_from(["cuda_oom_runtime", "crash_loop", "cuda_error_oom", "kv_pool_exhausted", "x"]), max_size=4
)


@given(
    kinds=kinds_st,
    fixes=st.lists(st.floats(0, 100 * H), max_size=6),
    now=st.floats(0, 100 * H),
    crashes=st.lists(st.tuples(st.sampled_from(["h1", "h2", "h3", "h4"]), st.floats(0, 100 * H)), max_size=8),
    in_flight=st.integers(0, 3),
    paused=st.booleans(),
    approval=st.booleans(),
)
def test_decide_never_acts_past_a_rail(
    kinds: list[str],
    fixes: list[float],
    now: float,
    crashes: list[tuple[str, float]],
    in_flight: int,
    paused: bool,
    approval: bool,
) -> None:
    p = Policy(approval=approval)
    history = HostHistory(fixes=tuple(sorted(fixes)))
    fleet = FleetView(4, tuple(crashes), in_flight, None, paused)
    d = decide(tuple(kinds), history, fleet, p, now)
    if d.verdict == "act":
        assert not paused and not approval and in_flight < p.concurrency
        assert set(kinds) - {"crash_loop"} == {"cuda_oom_runtime"}
        assert counted_fixes(history, now) < p.cap_per_day
        assert not any(0 <= now - t < p.cooldown_s for t in fixes)
        assert breaker_trip(fleet, p) is None


@given(
    crashes=st.lists(st.tuples(st.sampled_from(["h1", "h2", "h3", "h4", "h5"]), st.floats(0, 1000)), max_size=12),
    count=st.integers(1, 4),
)
def test_breaker_crossing_is_the_first_window_over_the_count(crashes: list[tuple[str, float]], count: int) -> None:
    """The sliding window agrees with the definition: the earliest crash time t at which more than ``count``
    hosts crashed within [t - window, t]."""
    p = Policy(breaker_percentage=None, breaker_count=count, breaker_window_s=60.0)
    ends = sorted(t for _, t in crashes)
    want = next((t for t in ends if len({h for h, u in crashes if t - 60.0 <= u <= t}) > count), None)
    got = breaker_crossing(FleetView(5, tuple(crashes)), p)
    assert (got[0] if got else None) == want
