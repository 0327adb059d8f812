"""The watcher's real loop (fleet/watch/loop.py) over scripted hosts: the breaker's window kept in watch.db
across a restart, the fleet-wide concurrency of fixes, and a reported incident decided again."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from remediate.controller.watch_audit import read_events
from remediate.controller.watch_state import WatchState
from remediate.core.watch.follow import FOLLOWING
from remediate.core.watch.policy import Policy
from remediate.errors import ConnectionLost
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.loop import Watcher
from remediate.models import CommandResult
from tests.support.fake_transport import FakeTransport
from tests.support.hosts import watched_host
from tests.support.watch_fleet import NOW, Fleet, Gate
from tests.support.watch_fleet import fixed as _fixed
from tests.support.watch_fleet import watcher as _watcher


def _settled(watcher: Watcher, now: float) -> None:
    """A round, then the fixes it started on the pool waited for and recorded (what the next round does)."""
    watcher.round(now)
    watcher._reap(now, wait=30, every=True)


def _verdicts(directory: Path) -> list[tuple[str, str]]:
    return [(e["host"], e["verdict"]) for e in read_events(directory) if e["event"] == "decided"]


# -- the breaker's crashes survive a restart of the watcher, each counted once at its own time -------------
def test_a_restarted_watcher_still_counts_the_crashes_inside_the_window(tmp_path: Path) -> None:
    fleet = Fleet(["h1", "h2", "h3", "h4"])
    policy = Policy(breaker_count=1, breaker_percentage=None, breaker_window_s=300.0)
    fixes: list[str] = []
    first = _watcher(tmp_path, fleet, policy, _fixed(fixes, fleet))
    first.round(NOW)
    fleet.units["h1"].crash(NOW + 5)
    _settled(first, NOW + 10)
    assert fixes == ["h1"], "one crashed host is within the breaker's count"
    first.close()
    first.state.close()

    fleet.units["h2"].crash(NOW + 50)
    second = _watcher(tmp_path, fleet, policy, _fixed(fixes, fleet))
    second.round(NOW + 60)  # h1's crash (the first watcher's) and h2's: 2 > 1 within 300 s
    assert fixes == ["h1"], "the breaker tripped: nothing more is fixed"
    assert second.state.breaker_reason() == "2 hosts crashed within 300s (more than 1)"
    assert _verdicts(tmp_path)[-1] == ("h2", "breaker_open")
    (trip,) = [e for e in read_events(tmp_path) if e["event"] == "breaker"]
    assert trip["round_at"] == NOW + 60 and abs(trip["crossed_at"] - (NOW + 50)) < 0.01
    assert sorted(c["host"] for c in trip["window"]) == ["h1", "h2"], "the crashes that crossed it, named"
    second.close()
    second.state.close()

    # `--resume` re-arms the breaker and forgives the crashes counted so far (a person looked at them).
    state = WatchState(tmp_path)
    state.reset_breaker()
    state.close()
    fleet.units["h2"].restarted()
    fleet.units["h3"].crash(NOW + 361)
    third = _watcher(tmp_path, fleet, policy, _fixed(fixes, fleet))
    _settled(third, NOW + 361)
    assert fixes == ["h1", "h3"]
    assert [h for h, _ in third.state.recent_crashes(0.0)] == ["h3"], "the crashes before the resume are forgiven"
    third.close()
    third.state.close()


def test_a_restarted_watcher_does_not_count_a_crash_again(tmp_path: Path) -> None:
    """h1 crashed long ago and is still down when a new watcher starts: the same crash (its invocation), at its
    own time, so it does not join h2's fresh crash in one window (a watcher that counted it at the round
    that saw it would trip here)."""
    fleet = Fleet(["h1", "h2", "h3", "h4"])
    policy = Policy(breaker_count=1, breaker_percentage=None, breaker_window_s=30.0)
    first = _watcher(tmp_path, fleet, policy, _fixed([]), kinds=())
    fleet.units["h1"].crash(NOW + 5)
    first.round(NOW + 10)
    first.close()
    first.state.close()
    fleet.units["h2"].crash(NOW + 95)
    second = _watcher(tmp_path, fleet, policy, _fixed([]), kinds=())
    second.round(NOW + 100)
    assert second.state.breaker_reason() is None
    seen = {e["host"]: e["crashes"] for e in read_events(tmp_path) if e["event"] == "detected"}
    assert [(c["key"], c["new"]) for c in seen["h1"]] == [("i1", False)], "the second watcher's sight of h1"
    assert [(c["key"], c["new"]) for c in seen["h2"]] == [("i1", True)]
    second.close()
    second.state.close()


def test_crashes_detected_rounds_apart_trip_by_their_own_times(tmp_path: Path) -> None:
    """h2's crash, 2 s after h1's, is seen 88 s later (a fix in flight, a dead watcher): it still trips."""
    fleet = Fleet(["h1", "h2", "h3", "h4"])
    policy = Policy(breaker_count=1, breaker_percentage=None, breaker_window_s=30.0)
    watcher = _watcher(tmp_path, fleet, policy, _fixed([]), kinds=())
    fleet.units["h1"].crash(NOW + 11)
    watcher.round(NOW + 12)
    assert watcher.state.breaker_reason() is None
    fleet.units["h2"].crash(NOW + 13)
    watcher.round(NOW + 100)
    assert watcher.state.breaker_reason() == "2 hosts crashed within 30s (more than 1)"
    assert _verdicts(tmp_path)[-1] == ("h2", "breaker_open")
    watcher.close()
    watcher.state.close()


# -- the fleet-wide concurrency of fixes ----------------------------------------------------------------
def test_fixes_on_different_hosts_run_in_parallel_up_to_the_limit(tmp_path: Path) -> None:
    fleet = Fleet(["h1", "h2", "h3", "h4"])
    gate = Gate()
    watcher = _watcher(tmp_path, fleet, Policy(concurrency=2, breaker_percentage=None), gate.fix)
    try:
        watcher.round(NOW)
        for name in ("h1", "h2", "h3"):
            fleet.units[name].crash()
        watcher.round(NOW + 10)
        gate.wait_started(2)
        assert sorted(gate.started) == ["h1", "h2"]
        assert ("h3", "wait") in _verdicts(tmp_path), "the third waits for a free slot"
        polls = fleet.units["h1"].polls
        watcher.round(NOW + 20)  # both still running: h3 waits on, the hosts being fixed are not polled
        assert sorted(gate.started) == ["h1", "h2"] and fleet.units["h1"].polls == polls

        gate.release("h1")
        fleet.units["h1"].restarted()
        watcher._reap(NOW + 25, wait=30)  # what the next round does first, waited for here
        watcher.round(NOW + 30)  # h1's slot is free: h3 is decided again and started
        gate.wait_started(3)
        assert gate.started[2] == "h3" and gate.most == 2
        assert ("h3", "act") in _verdicts(tmp_path)
        outcomes = [(e["host"], e["outcome"]) for e in read_events(tmp_path) if e["event"] == "outcome"]
        assert outcomes == [("h1", "remediated")]
    finally:
        for name in ("h1", "h2", "h3"):
            gate.release(name)
        watcher.close(wait_s=30)  # SIGTERM's path: the fixes in flight end and are recorded
        watcher.state.close()
    outcomes = sorted(e["host"] for e in read_events(tmp_path) if e["event"] == "outcome")
    assert outcomes == ["h1", "h2", "h3"]
    assert all(r["closed"] for r in WatchState(tmp_path).incidents())


def test_detection_never_waits_for_a_fix_at_concurrency_one(tmp_path: Path) -> None:
    """The default one-at-a-time: h1's fix runs (a long load); h2 crashes meanwhile and is polled, detected,
    counted and decided in the same round (`wait`, visibly in the audit and the incidents), then fixed once
    h1's fix ended. A round that ran the fix inline would hold here until the gate let h1 go."""
    fleet = Fleet(["h1", "h2", "h3"])
    gate = Gate()
    watcher = _watcher(tmp_path, fleet, Policy(breaker_percentage=None), gate.fix)
    assert watcher.policy.concurrency == 1
    try:
        watcher.round(NOW)
        fleet.units["h1"].crash()
        watcher.round(NOW + 10)
        gate.wait_started(1)
        fleet.units["h2"].crash()
        polls = fleet.units["h2"].polls
        watcher.round(NOW + 11)  # h1's fix still running
        assert fleet.units["h2"].polls == polls + 1, "the other hosts are polled while a fix runs"
        events = [(e["event"], e["host"]) for e in read_events(tmp_path) if e.get("host") == "h2"]
        assert events == [("detected", "h2"), ("diagnosed", "h2"), ("decided", "h2")]
        assert _verdicts(tmp_path) == [("h1", "act"), ("h2", "wait")]
        assert {r["host"]: r["outcome"] for r in watcher.state.incidents()} == {"h1": "remediating", "h2": "wait"}
        assert watcher.state.recent_crashes(0.0), "counted by the breaker"
        assert gate.started == ["h1"]

        gate.release("h1")
        watcher._reap(NOW + 12, wait=30)
        watcher.round(NOW + 13)  # the slot is free: h2 decided again and started
        gate.wait_started(2)
        assert gate.started == ["h1", "h2"] and gate.most == 1
    finally:
        for name in ("h1", "h2"):
            gate.release(name)
        watcher.close(wait_s=30)
        watcher.state.close()


def test_a_host_whose_journal_spoke_is_decided_before_the_others_are_polled(tmp_path: Path) -> None:
    """h1 is dead (each reconnect costs its timeouts, serially on the loop); h3's follower woke the loop: h3 is
    polled, detected and decided before h1 is even dialled (it was polled after h1 and h2, in inventory order)."""
    from remediate.errors import ConnectError

    fleet = Fleet(["h1", "h2", "h3"])
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fleet, Policy(breaker_percentage=None), _fixed(fixes, fleet))
    seen: list[list[str]] = []

    def dead(command: str, stdin: str | None) -> CommandResult:
        seen.append([f"{e['event']} {e.get('host')}" for e in read_events(tmp_path)])
        raise ConnectError("h1", "connection refused")

    def connect(entry: HostEntry) -> FakeTransport:
        return watched_host("h1", dead) if entry.name == "h1" else fleet.connect(entry)

    watcher.connect = connect  # type: ignore[method-assign]
    try:
        watcher.round(NOW)
        fleet.units["h3"].crash()
        watcher.woken("h3 sglang.service")  # a follower wakes its unit (host_key)
        watcher.round(NOW + 10)
        assert "decided h3" in seen[-1] and "detected h3" in seen[-1], seen[-1]
        assert _verdicts(tmp_path) == [("h3", "act")]
    finally:
        watcher.close(wait_s=30)
        watcher.state.close()


def test_never_two_fixes_on_one_host(tmp_path: Path) -> None:
    """h1 crashes again (a second incident past the fold window) while its fix runs: not polled, not fixed
    twice; an approval answered for it waits until its fix ended."""
    fleet = Fleet(["h1", "h2"])
    gate = Gate()
    watcher = _watcher(tmp_path, fleet, Policy(concurrency=2, breaker_percentage=None, cooldown_s=1.0), gate.fix)
    try:
        watcher.round(NOW)
        fleet.units["h1"].crash()
        watcher.round(NOW + 10)
        gate.wait_started(1)
        fleet.units["h1"].crash()
        for t in (NOW + 700, NOW + 710):
            watcher.round(t)
        assert gate.started == ["h1"]
        assert [h for h, _ in _verdicts(tmp_path)] == ["h1"]
    finally:
        gate.release("h1")
        watcher.close(wait_s=30)
        watcher.state.close()


# -- a reported incident decided again ------------------------------------------------------------------
def test_a_crash_folded_into_a_reported_incident_is_decided_again(tmp_path: Path) -> None:
    """Paused: the crash is reported; resumed, the next crash of the same loop folds into the incident and
    is decided again — now fixed. A crash folded while nothing changed stays folded (decided once)."""
    fleet = Fleet(["h1", "h2", "h3"])
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fleet, Policy(breaker_percentage=None), _fixed(fixes))
    watcher.state.set_paused(True)
    watcher.round(NOW)
    fleet.units["h1"].crash()
    watcher.round(NOW + 10)
    fleet.units["h1"].crash()
    watcher.round(NOW + 20)  # still paused: folded, not decided again
    assert fixes == [] and [e["event"] for e in read_events(tmp_path)][-1] == "folded"
    watcher.state.set_paused(False)
    fleet.units["h1"].crash()
    watcher.round(NOW + 30)
    watcher._reap(NOW + 30, wait=30, every=True)  # the fix runs on the pool: the next round records it
    assert fixes == ["h1"]
    decided = [e for e in read_events(tmp_path) if e["event"] == "decided"]
    assert [d["verdict"] for d in decided] == ["report", "act"]
    assert decided[1]["redecided_from"] == "report" and decided[1]["incident"] == decided[0]["incident"]
    row = watcher.state.incidents()[0]
    assert row["crashes"] == 3 and row["outcome"] == "remediated" and row["closed"] == 1
    watcher.close()
    watcher.state.close()


def test_a_restart_with_a_policy_that_fixes_the_kind_decides_the_incident_again(tmp_path: Path) -> None:
    fleet = Fleet(["h1", "h2", "h3"])
    fixes: list[str] = []
    kinds = ("cuda_oom_graph_capture",)
    first = _watcher(tmp_path, fleet, Policy(breaker_percentage=None), _fixed(fixes), kinds)
    first.round(NOW)
    fleet.units["h1"].crash()
    first.round(NOW + 10)
    assert _verdicts(tmp_path) == [("h1", "report")]
    first.close()
    first.state.close()

    policy = Policy(fixed_kinds=frozenset({"cuda_oom_runtime", "cuda_oom_graph_capture"}), breaker_percentage=None)
    second = _watcher(tmp_path, fleet, policy, _fixed(fixes, fleet), kinds)
    _settled(second, NOW + 20)  # the unit is still down: a crash of the same loop, folded, decided again
    _settled(second, NOW + 30)
    assert fixes == ["h1"] and _verdicts(tmp_path) == [("h1", "report"), ("h1", "act")]
    second.close()
    second.state.close()


def test_needs_human_is_not_decided_again(tmp_path: Path) -> None:
    fleet = Fleet(["h1", "h2", "h3"])
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fleet, Policy(breaker_percentage=None, cap_per_day=1, cooldown_s=1.0), _fixed(fixes))
    watcher.round(NOW)
    for t in (NOW + 10, NOW + 20, NOW + 30):
        fleet.units["h1"].crash()
        _settled(watcher, t)
    assert fixes == ["h1"]
    assert [v for _, v in _verdicts(tmp_path)] == ["act", "needs_human"]
    assert [e["event"] for e in read_events(tmp_path)][-1] == "folded"
    watcher.close()
    watcher.state.close()


# -- the followed journal wakes the poll ------------------------------------------------------------------
class Channel:
    """A followed channel the test writes to: ``say(line)``; ``cut()`` kills it (ConnectionLost)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.queue: queue.Queue[bytes | None] = queue.Queue()

    def lines(self, timeout: float) -> list[bytes]:
        try:
            line = self.queue.get(timeout=timeout)
        except queue.Empty:
            return []
        if line is None:
            raise ConnectionLost(self.host, "the followed command ended")
        return [line]


class FollowedFleet(Fleet):
    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        self.channels: dict[str, Channel] = {}
        self.follows: dict[str, int] = dict.fromkeys(names, 0)

    def connect(self, entry: HostEntry) -> FakeTransport:
        transport = super().connect(entry)
        fleet = self

        @contextmanager
        def follow(command: str) -> Iterator[Channel]:
            assert "journalctl -u sglang.service -f -n 0 -o json" in command
            fleet.follows[entry.name] += 1
            channel = fleet.channels[entry.name] = Channel(entry.name)
            channel.queue.put(FOLLOWING.encode())
            yield channel

        transport.follow = follow  # type: ignore[method-assign]
        return transport


def _systemd(message: str) -> bytes:
    return json.dumps({"__CURSOR": "x", "_PID": "1", "UNIT": "sglang.service", "MESSAGE": message}).encode()


def test_a_followed_host_is_polled_when_systemd_speaks_and_polled_again_when_its_channel_dies(
    tmp_path: Path,
) -> None:
    fleet = FollowedFleet(["h1", "h2", "h3"])
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fleet, Policy(breaker_percentage=None), _fixed(fixes, fleet))
    watcher.follow = True
    try:
        watcher.round(NOW)  # polled, then followed
        assert watcher.wait(30, settle=0), "a follow that starts wakes its host (the poll covers the gap)"
        watcher.round(NOW + 1)
        polls = {n: u.polls for n, u in fleet.units.items()}
        watcher.round(NOW + 10)
        watcher.round(NOW + 20)
        assert {n: u.polls for n, u in fleet.units.items()} == polls, "followed and quiet: no round trip"

        fleet.channels["h1"].queue.put(b'{"__CURSOR": "y", "_PID": "77", "MESSAGE": "Decode batch. #running-req: 3"}')
        assert not watcher.wait(1, settle=0), "the server's own lines wake nothing"
        fleet.units["h1"].crash()
        fleet.channels["h1"].queue.put(_systemd("sglang.service: Main process exited, code=exited, status=1/FAILURE"))
        assert watcher.wait(30, settle=0)
        _settled(watcher, NOW + 21)
        assert fixes == ["h1"] and fleet.units["h2"].polls == polls["h2"], "only the host that spoke is polled"

        fleet.channels["h2"].queue.put(None)  # h2's channel dies: woken, then polled every round (the fallback)
        assert watcher.wait(30, settle=0)
        watcher.round(NOW + 22)
        watcher.round(NOW + 23)
        assert fleet.units["h2"].polls == polls["h2"] + 2
        assert fleet.units["h3"].polls == polls["h3"]
    finally:
        watcher.close()
        watcher.state.close()
    assert all(h.follower is None for h in watcher._hosts.values()), "every follower stopped"
