"""Rollout strategy: batches (Ansible serial semantics), failure budget, canary, forks cap, Ctrl-C."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediate.errors import ConfigError
from remediate.fleet.rollout import Rollout, Strategy, failure_budget, parse_batch, plan_batches
from remediate.models import HostResult


def test_plan_batches_canary_then_serial_list_last_repeats() -> None:
    assert plan_batches(12, Strategy(canary=1, batch=parse_batch("1,10%,25%"))) == [1, 1, 1, 3, 3, 3]
    assert plan_batches(12, Strategy(canary=1, batch=("100%",))) == [1, 11]
    assert plan_batches(5, Strategy(canary=0, batch=("2",))) == [2, 2, 1]
    assert plan_batches(3, Strategy(canary=5)) == [3]
    assert plan_batches(0, Strategy()) == []
    assert plan_batches(10, Strategy(canary=1, batch=("1%",))) == [1] * 10  # never below 1


@given(st.integers(0, 300), st.integers(0, 5), st.lists(st.sampled_from(["1", "3", "10%", "25%", "100%"]), min_size=1))
def test_batches_cover_every_host_exactly_once(total: int, canary: int, batch: list[str]) -> None:
    sizes = plan_batches(total, Strategy(canary=canary, batch=tuple(batch)))
    assert sum(sizes) == total
    assert all(s >= 1 for s in sizes)


@pytest.mark.parametrize("bad", ["0", "-1", "x", "10%%", ""])
def test_bad_batch_specs(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_batch(bad)


def test_failure_budget() -> None:
    assert failure_budget("0", 12) == 0
    assert failure_budget("2", 12) == 2
    assert failure_budget("25%", 12) == 3
    with pytest.raises(ConfigError):
        failure_budget("lots", 12)


def _work(fail: set[str], log: list[tuple[str, float, float]], lock: threading.Lock, delay: float = 0.02):
    def work(name: str) -> HostResult:
        start = time.monotonic()
        time.sleep(delay)  # stands in for remote work; the scheduler, not timing, is under test
        end = time.monotonic()
        with lock:
            log.append((name, start, end))
        outcome = "rolled_back" if name in fail else "remediated"
        return HostResult(host=name, outcome=outcome, exit_code=1 if name in fail else 0)

    return work


def test_rollout_order_and_halt_on_budget() -> None:
    hosts = [f"h{i:02d}" for i in range(12)]
    log: list[tuple[str, float, float]] = []
    rollout = Rollout(
        hosts=hosts,
        name_of=str,
        work=_work({"h03"}, log, threading.Lock()),
        strategy=Strategy(canary=1, batch=("2",), forks=2, max_failures="0"),
    )
    results = rollout.run()
    outcomes = {r.host: r.outcome for r in results}
    assert [r.host for r in results] == hosts
    assert outcomes["h00"] == "remediated"
    assert outcomes["h03"] == "rolled_back"
    # batches [h00] [h01 h02] [h03 h04] → h04 was in flight with h03 and finishes; later batches never start
    assert all(outcomes[h] == "not_attempted" for h in hosts[5:])
    assert rollout.halted and "exceed --max-failures 0" in rollout.halted
    started = [name for name, _, _ in sorted(log, key=lambda item: item[1])]
    assert started[0] == "h00"


def test_forks_hosts_are_worked_on_at_once_never_more() -> None:
    """24 hosts in one batch, --forks 3: exactly three in flight at once. Each host's work waits at a barrier
    of three, so the cap is reached for certain, not by timing: a rollout that ignored forks and went one
    host at a time breaks the barrier; one that started the whole batch has more than three in flight (24
    hosts are enough for that to show)."""
    forks, hosts = 3, [f"h{i}" for i in range(24)]
    barrier = threading.Barrier(forks, timeout=10)  # a hang guard only: with the cap honoured it opens at once
    lock = threading.Lock()
    now = most = 0

    def work(name: str) -> HostResult:
        nonlocal now, most
        with lock:
            now += 1
            most = max(most, now)
        try:
            barrier.wait()
        finally:
            with lock:
                now -= 1
        return HostResult(host=name, outcome="remediated")

    strategy = Strategy(canary=0, batch=("100%",), forks=forks)
    results = Rollout(hosts=hosts, name_of=str, work=work, strategy=strategy).run()
    assert [r.outcome for r in results] == ["remediated"] * len(hosts), [r.error for r in results]
    assert most == forks


def test_canary_failure_stops_everything_even_with_budget() -> None:
    log: list[tuple[str, float, float]] = []
    rollout = Rollout(
        hosts=["a", "b", "c"],
        name_of=str,
        work=_work({"a"}, log, threading.Lock()),
        strategy=Strategy(canary=1, max_failures="5"),
    )
    results = rollout.run()
    assert [r.outcome for r in results] == ["rolled_back", "not_attempted", "not_attempted"]
    assert "canary" in (rollout.halted or "")


def test_pause_after_canary_declined() -> None:
    log: list[tuple[str, float, float]] = []
    asked: list[str] = []
    rollout = Rollout(
        hosts=["a", "b"],
        name_of=str,
        work=_work(set(), log, threading.Lock()),
        strategy=Strategy(canary=1, pause_after_canary=True),
        confirm=lambda text: asked.append(text) is not None,
    )
    results = rollout.run()
    assert asked and [r.outcome for r in results] == ["remediated", "not_attempted"]


def test_custom_stop_policy() -> None:
    log: list[tuple[str, float, float]] = []
    rollout = Rollout(
        hosts=["a", "b", "c", "d"],
        name_of=str,
        work=_work(set(), log, threading.Lock()),
        strategy=Strategy(canary=1, batch=("1",), forks=1),
        stop_when=lambda r: "b looked bad" if r.host == "b" else None,
    )
    results = rollout.run()
    assert [r.outcome for r in results] == ["remediated", "remediated", "not_attempted", "not_attempted"]
    assert rollout.halted == "b looked bad"


@pytest.mark.usefixtures("default_sigint")
def test_ctrl_c_lets_in_flight_hosts_finish_and_starts_no_new_ones() -> None:
    main = threading.main_thread().ident
    assert main is not None
    finished: list[str] = []

    def work(name: str) -> HostResult:
        if name == "b":
            signal.pthread_kill(main, signal.SIGINT)  # the operator presses Ctrl-C while b is in flight
            deadline = time.monotonic() + 30
            while not rollout.interrupted and time.monotonic() < deadline:  # b works on until the interrupt lands
                time.sleep(0.005)
        finished.append(name)
        return HostResult(host=name, outcome="remediated")

    rollout = Rollout(
        hosts=["a", "b", "c", "d"], name_of=str, work=work, strategy=Strategy(canary=1, batch=("1",), forks=1)
    )
    results = rollout.run()
    assert [r.outcome for r in results] == ["remediated", "remediated", "not_attempted", "not_attempted"]
    assert finished == ["a", "b"]
    assert rollout.interrupted and "interrupted" in (rollout.halted or "")
