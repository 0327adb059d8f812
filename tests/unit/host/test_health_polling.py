"""The health wait's schedule, on a scripted host: the first poll right after the restart, gaps capped at 1 s,
and the unit's state read often at first but only every few seconds while a big model loads for minutes."""

from __future__ import annotations

import json

import pytest

from remediate.core.probe import ServiceState
from remediate.errors import UnhealthyError
from remediate.host.common.health import MAX_GAP_S, STATE_EVERY_S, wait_healthy
from remediate.transport.base import HttpResponse
from tests.support.clock import Naps
from tests.support.fake_transport import LISTENER_SCRIPT, FakeTransport, listener_output, state_output
from tests.support.hosts import waiting_host

UNIT = "sglang.service"
POLL = r"\Asystemctl show"
INFO = (200, json.dumps({"max_total_num_tokens": 195011}))


def _host(refused: int) -> FakeTransport:
    return waiting_host(*([None] * refused), 200, info=INFO)


def _wait(host: FakeTransport, naps: Naps) -> int:
    healthy = wait_healthy(
        host, UNIT, ("127.0.0.1", 30000), timeout=3600, restart_epoch=None, invocation_id="inv-2", sleep=naps
    )
    return healthy.tokens


def test_an_instant_server_is_seen_on_the_first_poll(naps: Naps) -> None:
    host = _host(refused=0)
    assert _wait(host, naps) == 195011
    assert naps == []  # no pause before the first poll
    assert [c.path for c in host.http_calls] == ["/health", "/server_info"]
    assert len(host.ran(POLL)) == 1  # the state, once, before success


def test_a_long_load_polls_health_at_least_every_second_and_the_state_rarely(naps: Naps) -> None:
    refused = 600  # ten minutes of loading at the 1 s cap
    host = _host(refused)
    assert _wait(host, naps) == 195011
    assert naps[0] <= 0.05 and max(naps) == MAX_GAP_S  # backoff grows, capped: readiness seen within 1 s
    assert naps == sorted(naps)
    loading = sum(naps)
    state_reads = len(host.ran(POLL))
    assert state_reads <= loading / STATE_EVERY_S + 12  # every 5 s once loading is under way
    assert state_reads < refused / 4  # far fewer than the health polls
    assert host.ran(r"\Ajournalctl") == []  # no journal reads beyond the state's newest line


def test_a_crash_while_loading_is_noticed_by_the_next_state_read(naps: Naps) -> None:
    polls = (
        state_output("activating", "start", invocation_id="inv-2"),
        state_output("activating", "auto-restart", result="exit-code", invocation_id="inv-2", main_pid=0),
    )
    host = waiting_host(None, polls=polls, journal=("torch.OutOfMemoryError: CUDA out of memory.\n",))
    with pytest.raises(UnhealthyError, match="crashed while loading"):
        _wait(host, naps)
    assert len(host.ran(POLL)) == 2
    assert sum(naps) <= 1.5  # found by the read a second after the first one


def test_another_server_answering_while_the_unit_failed_is_not_success(naps: Naps) -> None:
    failed = state_output("failed", "failed", result="exit-code", invocation_id="inv-2", main_pid=0)
    host = waiting_host(200, info=INFO, polls=(failed,))
    with pytest.raises(UnhealthyError, match="failed"):
        _wait(host, naps)


def test_a_fresh_look_at_our_running_unit_is_not_repeated_when_the_server_answers(naps: Naps) -> None:
    host = _host(refused=1)  # the state read on the first poll saw it active, InvocationID ours, MainPID set
    assert _wait(host, naps) == 195011
    assert len(host.ran(POLL)) == 1


def test_an_activating_unit_is_looked_at_again_when_the_server_answers(naps: Naps) -> None:
    polls = (state_output("activating", "start", invocation_id="inv-2"), state_output(invocation_id="inv-2"))
    host = waiting_host(None, 200, info=INFO, polls=polls)
    assert _wait(host, naps) == 195011
    assert len(host.ran(POLL)) == 2


def test_the_last_look_brings_the_state_so_no_separate_read_follows(naps: Naps) -> None:
    host = FakeTransport("gpu-01")
    host.on(POLL, state_output("activating", "start", invocation_id="inv-2"))
    running = {"ActiveState": "active", "SubState": "running", "NRestarts": 0, "InvocationID": "inv-2"}
    host.on(rf"\A{LISTENER_SCRIPT}", listener_output(listen="0.0.0.0:30000", state=running))
    host.http("/health", None, 200)
    host.http("/server_info", INFO)
    assert _wait(host, naps) == 195011
    assert len(host.ran(POLL)) == 1  # the first poll's read; the answer's look read the state with the owner


def test_a_new_main_pid_in_the_last_look_fails_the_wait(naps: Naps) -> None:
    host = FakeTransport("gpu-01")
    host.on(POLL, state_output("activating", "start", invocation_id="inv-2", main_pid=4242))
    moved = {"ActiveState": "active", "SubState": "running", "NRestarts": 0, "InvocationID": "inv-2"}
    host.on(rf"\A{LISTENER_SCRIPT}", listener_output(main_pid=5000, listen="0.0.0.0:30000", state=moved))
    host.on(r"\Ajournalctl", "\n")  # the verdict's journal
    host.http("/health", None, 200)
    host.http("/server_info", INFO)
    with pytest.raises(UnhealthyError, match="MainPID changed 4242 → 5000"):
        _wait(host, naps)


def test_without_a_progress_line_the_state_reads_skip_the_journal(naps: Naps) -> None:
    host = _host(refused=3)
    _wait(host, naps)
    assert all("journalctl" not in c.command for c in host.ran(POLL))
    host = _host(refused=3)
    wait_healthy(
        host, UNIT, ("127.0.0.1", 30000), timeout=60, restart_epoch=None, on_progress=lambda *_: None, sleep=naps
    )
    assert all("journalctl -u" in c.command for c in host.ran(POLL))


def _restarted(active: str = "active", sub: str = "running", result: str = "success") -> ServiceState:
    """The state the commit script read right after its restart (its ``@@state`` lines)."""
    props = {"ActiveState": active, "SubState": sub, "Result": result, "NRestarts": "0", "MainPID": "4242"}
    return ServiceState(unit=UNIT, properties={**props, "InvocationID": "inv-2"})


def _wait_after(host: FakeTransport, restarted: ServiceState, naps: Naps) -> int:
    """The wait as the transaction runs it: with the commit script's state read right after the restart."""
    healthy = wait_healthy(
        host, UNIT, ("127.0.0.1", 30000), timeout=3600, restart_epoch=None, invocation_id="inv-2",
        initial_state=restarted, sleep=naps,
    )  # fmt: skip
    return healthy.tokens


def test_the_commits_state_read_is_the_first_one_so_the_wait_starts_with_a_poll(naps: Naps) -> None:
    host = _host(refused=3)
    assert _wait_after(host, _restarted(), naps) == 195011
    assert host.ran(POLL) == []  # the restart's own read stands: a running server answering is ours
    assert [c.path for c in host.http_calls][:4] == ["/health"] * 4


def test_a_unit_that_failed_right_after_the_restart_fails_the_wait_at_once(naps: Naps) -> None:
    host = _host(refused=3)
    with pytest.raises(UnhealthyError, match="failed"):
        _wait_after(host, _restarted("failed", "failed", "exit-code"), naps)
    assert host.http_calls == [] and naps == []


def test_a_poll_that_is_not_refused_is_named_in_the_progress(naps: Naps) -> None:
    """Every failed poll read "port closed", a timeout or a wrong port included: the wrong-port bug hid behind it."""
    host = _host(refused=0)
    host.http("/health", None)
    seen: list[str] = []
    real = host.http_get

    def timed_out(addr: str, port: int, path: str, *, timeout: float = 5.0) -> HttpResponse:
        got = real(addr, port, path, timeout=timeout)
        return (
            HttpResponse(status=None, body=b"", error=f"{addr}:{port}{path}: timed out") if got.status is None else got
        )

    host.http_get = timed_out  # type: ignore[method-assign]
    with pytest.raises(UnhealthyError):
        wait_healthy(
            host, UNIT, ("127.0.0.1", 30000), timeout=0.05, restart_epoch=None, invocation_id="inv-2",
            on_progress=lambda phase, _elapsed, _line: seen.append(phase), sleep=naps,
        )  # fmt: skip
    assert seen and seen[0] == "loading (no answer on 127.0.0.1:30000: 127.0.0.1:30000/health: timed out)"
