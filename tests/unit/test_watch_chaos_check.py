"""The chaos run's checker (tests/support/watch_chaos_check.py) on made-up audit logs: it must catch a missing
step, an incident whose end is not its last decision, a fix acted on twice, a breaker that tripped late or
without a crossing, and it must count a restarted watcher's crash window afresh (or not, for a window kept in
the state)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.support.watch_chaos import ChaosConfig, Injection, Lifetime
from tests.support.watch_chaos_check import _breaker, _crash_time_crossing, _steps


def _crash(host: str, at: float, incident: str | None, verdict: str = "report") -> list[dict[str, Any]]:
    base = {"host": host, "at": at, "round_at": at}
    tail = {"event": "decided", "incident": incident, "verdict": verdict} if incident else {"event": "folded"}
    return [{**base, "event": "detected"}, {**base, "event": "diagnosed"}, {**base, **tail}]


def _chaos(*starts: float, count: int = 2, window: float = 10.0) -> Any:
    config = ChaosConfig(seed=1, duration_s=1, breaker_count=count, breaker_window_s=window)
    return SimpleNamespace(config=config, lifetimes=[Lifetime(i, s) for i, s in enumerate(starts)], injections=[])


def test_steps_pass_a_whole_log_and_catch_what_is_missing() -> None:
    events = _crash("a", 1, "i1", "act") + [
        {"event": "acted", "host": "a", "incident": "i1", "at": 1.1},
        {"event": "outcome", "host": "a", "incident": "i1", "outcome": "remediated", "at": 2},
    ] + _crash("a", 3, None)  # fmt: skip
    rows = [{"id": "i1", "host": "a", "outcome": "remediated"}]
    violations: list[str] = []
    assert _steps(events, rows, violations) == {
        "crashes_detected": 2,
        "folded": 1,
        "undecided": 0,
        "redetected_after_a_stop": 0,
        "repeat_left_by_a_stop": 0,
        "recovered": 0,
    }
    assert violations == []

    broken = events[:1] + events[2:] + [{"event": "acted", "host": "a", "incident": "i1", "at": 4}]
    _steps(broken, rows, violations)
    assert any("detected at 1.000 then" in v for v in violations), violations
    assert any("acted 2" in v for v in violations), violations


def test_an_incident_ending_elsewhere_than_its_last_decision_or_never_decided_is_caught() -> None:
    events = _crash("a", 1, "i1") + _crash("a", 2, "i1", "needs_human")  # a reported incident decided again
    violations: list[str] = []
    _steps(events, [{"id": "i1", "host": "a", "outcome": "needs_human"}], violations)
    assert violations == []
    _steps(events, [{"id": "i1", "host": "a", "outcome": "report"}], violations)
    assert violations == ["incident i1: last decided 'needs_human' but watch.db says 'report'"]
    violations.clear()
    _steps([], [{"id": "i2", "host": "a", "outcome": "report"}], violations)
    assert violations == ["incident i2: never decided"]


def test_the_breaker_must_trip_at_the_crossing() -> None:
    crashes = _crash("a", 1, "i1") + _crash("b", 2, "i2") + _crash("c", 3, "i3", "breaker_open")
    trip = [{"event": "breaker", "at": 3, "round_at": 3}]
    violations: list[str] = []
    out = _breaker(_chaos(0), crashes + trip, "3 hosts", violations)
    assert violations == [] and out["trips"] == 1 and out["matched"] == "process"

    late = crashes + _crash("d", 4, "i4", "breaker_open") + [{"event": "breaker", "at": 4, "round_at": 4}]
    _breaker(_chaos(0), late, "4 hosts", violations)
    assert any("tripped at 4.0 but the threshold was crossed at" in v for v in violations), violations

    violations.clear()
    _breaker(_chaos(0), crashes, None, violations)
    assert any("tripped at None" in v for v in violations), "a crossing with no trip is caught"


def test_a_restarted_watcher_counts_afresh_unless_the_window_is_kept() -> None:
    crashes = _crash("a", 1, "i1") + _crash("b", 2, "i2") + _crash("c", 3, "i3", "breaker_open")
    trip = [{"event": "breaker", "at": 3, "round_at": 3}]
    violations: list[str] = []
    # A watcher started at 2.5 saw one crash: a trip at 3 matches only a window kept across restarts.
    out = _breaker(_chaos(0, 2.5), crashes + trip, "3 hosts", violations)
    assert violations == [] and out["matched"] == "state"
    assert out["crossing"] == {"process": None, "state": 3.0, "crash_time": None}  # no crash times logged

    _breaker(_chaos(0, 2.5), crashes + trip, "3 hosts", violations, "process")
    assert any("tripped at 3.0" in v for v in violations), "--breaker-model process: the kept window is refused"


OPEN = "breaker_open"


def _timed(host: str, round_at: float, *crashes: tuple[str, float], verdict: str = "report") -> list[dict[str, Any]]:
    """A crash as the watcher logs it now: its ``detected`` record lists the crashes (key, own time)."""
    events = _crash(host, round_at, f"i-{host}-{round_at:g}", verdict)
    events[0]["crashes"] = [{"key": k, "at": t, "new": True} for k, t in crashes]
    return events


def test_the_breaker_must_trip_at_the_crossing_by_crash_times() -> None:
    """Crashes at 1, 2 and 3 detected at rounds 1, 2 and 30 (a fix in flight): the trip belongs in round 30."""
    crashes = (
        _timed("a", 1, ("a1", 1.0)) + _timed("b", 2, ("b1", 2.0)) + _timed("c", 30, ("c1", 3.0), verdict="breaker_open")
    )
    trip = [{"event": "breaker", "at": 30, "round_at": 30, "crossed_at": 3.0}]
    violations: list[str] = []
    out = _breaker(_chaos(0), crashes + trip, "3 hosts", violations, "crash_time")
    assert violations == [] and out["matched"] == "crash_time" and out["by_time"]["at"] == 3.0
    assert out["crossing"]["state"] is None, "counted at the detecting rounds, the three are 29 s apart"

    early = [{"event": "breaker", "at": 2, "round_at": 2, "crossed_at": 2.0}]
    _breaker(_chaos(0), crashes + early, "2 hosts", violations, "crash_time")
    assert any("tripped at 2.0 but the threshold was crossed at" in v for v in violations), violations
    violations.clear()
    wrong = [{**trip[0], "crossed_at": 2.5}]
    _breaker(_chaos(0), crashes + wrong, "3 hosts", violations, "crash_time")
    assert violations == ["the breaker says it was crossed at 2.5, the crash times at 3.0"]


def test_a_trip_decided_before_the_rest_of_its_round_was_polled_says_what_it_knew() -> None:
    """CI's chaos run (seed 22): in one round the hosts whose journal spoke (b at 0.308, c) tripped the breaker
    before d, polled after them, showed an earlier crash (0.2955): crossed_at 0.308 is right by the window it
    names; a window that names a crash no detection gave, or too few hosts, is not."""
    events = (
        _timed("a", 0.1, ("a1", 0.1))
        + _timed("b", 1, ("b1", 0.308), verdict=OPEN)
        + _timed("c", 1, ("c1", 0.2), verdict=OPEN)
    )
    known = [{"host": "a", "at": 0.1}, {"host": "c", "at": 0.2}, {"host": "b", "at": 0.308}]
    events += [{"event": "breaker", "at": 1, "round_at": 1, "crossed_at": 0.308, "window": known}]
    events += _timed("d", 1, ("d1", 0.2955), verdict=OPEN)
    violations: list[str] = []
    out = _breaker(_chaos(0), events, "3 hosts", violations, "crash_time")
    assert out["by_time"]["at"] == 0.2955 and violations == []
    for window in ([{"host": "a", "at": 0.1}, {"host": "b", "at": 0.308}],
                   [{"host": "a", "at": 0.1}, {"host": "c", "at": 0.25}, {"host": "b", "at": 0.308}]):  # fmt: skip
        wrong = [e if e["event"] != "breaker" else {**e, "window": window} for e in events]
        _breaker(_chaos(0), wrong, "3 hosts", violations, "crash_time")
        assert violations == ["the breaker says it was crossed at 0.308, the crash times at 0.2955"], window
        violations.clear()


def test_a_crash_seen_again_is_not_counted_again() -> None:
    """A restarted watcher sees a1 (crashed at 1) again at round 20, beside c's fresh crash: no crossing by the
    crashes' times, so a trip there is caught; and a crash time after its detection is caught."""
    events = _timed("a", 1, ("a1", 1.0)) + _timed("b", 2, ("b1", 2.0)) + _timed("a", 20, ("a1", 20.0))
    events += _timed("c", 21, ("c1", 21.0), verdict="breaker_open")
    events += [{"event": "breaker", "at": 21, "round_at": 21, "crossed_at": 21.0}]
    violations: list[str] = []
    out = _breaker(_chaos(0), events, "3 hosts", violations, "crash_time")
    assert out["by_time"]["seen_again"] == 1 and out["by_time"]["crashes"] == 3
    assert any("tripped at 21.0 but the threshold was crossed at" in v for v in violations), violations
    violations.clear()
    _breaker(_chaos(0), _timed("a", 1, ("a1", 5.0)), None, violations, "crash_time")
    assert violations == ["a: crash a1 at 5.000, after its detection at 1.000"]


def test_a_crash_left_undecided_by_a_stopped_watcher_must_be_found_again() -> None:
    orphan = [{"event": "detected", "host": "a", "at": 1.0, "round_at": 1.0}]
    again = _crash("a", 3, "i1")
    rows = [{"id": "i1", "host": "a", "outcome": "report"}]
    violations: list[str] = []
    assert _steps(orphan + again, rows, violations, stops=(2.0,))["redetected_after_a_stop"] == 1
    assert violations == []
    _steps(orphan + again, rows, violations, stops=())
    assert violations == ["a: detected at 1.000 then ['detected', 'diagnosed']"], "no stop: a lost step"
    violations.clear()
    _steps(orphan, [], violations, stops=(2.0,))
    assert violations, "a crash never found again is lost"


def test_a_restart_repeat_left_by_a_stopped_watcher_is_no_lost_crash() -> None:
    repeat = [{"event": "detected", "host": "a", "at": 5.0, "round_at": 5.0, "reason": "NRestarts 0 → 1"}]
    rows = [{"id": "i1", "host": "a", "outcome": "report"}]
    violations: list[str] = []
    steps = _steps(_crash("a", 3, "i1") + repeat, rows, violations, stops=(6.0,))
    assert steps["repeat_left_by_a_stop"] == 1 and violations == []
    _steps(repeat, [], violations, stops=(6.0,))
    assert violations, "an NRestarts detection with no crash decided before it is a lost crash"


def test_a_crash_injected_right_after_a_planned_restart_is_that_crash() -> None:
    """Seed 2: a stop+start on a ended at 11.0, the 32k prefill crashed it at 11.66 (injected at 11.67): the crash
    the audit counts is the injected one; the same crash time with no injected crash behind it is the restart's."""
    chaos = _chaos(0)
    planned = Injection(11.0, "planned", "a", "stop+start", started=10.3)
    events = _timed("a", 12, ("a1", 11.66))
    violations: list[str] = []
    chaos.injections = [planned, Injection(11.67, "crash", "a", "crashed")]
    _crash_time_crossing(chaos, events, violations)
    assert violations == []
    chaos.injections = [planned]
    _crash_time_crossing(chaos, events, violations)
    assert violations == ["a: crash a1 at 11.660 during a planned injection (10.300-11.000)"]


def test_a_decision_taken_again_follows_its_first_one() -> None:
    """Seed 10: a crash decided `wait` (a fix in flight elsewhere) is decided again, `act`, once the slot came
    free: no detected → diagnosed of its own; a decision taken again for an incident never decided is caught."""
    events = _crash("a", 1, "i1", "wait") + [
        {"event": "decided", "host": "a", "incident": "i1", "verdict": "act", "redecided_from": "wait", "at": 2},
    ]
    violations: list[str] = []
    _steps(events, [{"id": "i1", "host": "a", "outcome": "remediating"}], violations)
    assert violations == []
    orphan = [{**events[-1], "incident": "i2"}]
    _steps(events[:-1] + orphan, [{"id": "i1", "host": "a", "outcome": "remediating"}], violations)
    assert violations == ["a: decided at 2.000 without detected → diagnosed before it"]
