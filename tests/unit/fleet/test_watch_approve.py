"""An approved fix goes through the rails as they are when it would act (the breaker, the pause, the cap,
the cooldown): it waits meanwhile, the audit saying why once per reason; an approval expires after the
policy's ``approval_ttl``. And the rails' clock: a fix stamped in the future still holds the cooldown and
the cap (clamped to now, said in the audit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.controller.watch_audit import read_events
from remediate.controller.watch_state import WatchState
from remediate.core.watch.incident import HostHistory
from remediate.core.watch.policy import Policy
from remediate.errors import ConfigError
from remediate.fleet.watch.clock import SteadyClock
from remediate.fleet.watch.loop import Watcher
from tests.support.watch_fleet import NOW, Fleet
from tests.support.watch_fleet import fixed as _fixed
from tests.support.watch_fleet import watcher as _watcher


def _events(directory: Path, kind: str) -> list[dict[str, object]]:
    return [e for e in read_events(directory) if e["event"] == kind]


def _waiting_for_approval(tmp_path: Path, policy: Policy, fixes: list[str]) -> tuple[Fleet, Watcher]:
    fleet = Fleet(["h1", "h2", "h3", "h4"])
    watcher = _watcher(tmp_path, fleet, policy, _fixed(fixes, fleet))
    watcher.round(NOW)
    fleet.units["h1"].crash(NOW + 5)
    watcher.round(NOW + 10)
    assert _events(tmp_path, "decided")[-1]["verdict"] == "wait_approval"
    return fleet, watcher


@pytest.mark.parametrize("rail", ["breaker", "paused"])
def test_an_approved_fix_waits_for_the_breaker_and_the_pause(tmp_path: Path, rail: str) -> None:
    fixes: list[str] = []
    fleet, watcher = _waiting_for_approval(tmp_path, Policy(approval=True), fixes)
    if rail == "breaker":
        watcher.state.trip_breaker("by hand")
    else:
        watcher.state.set_paused(True)
    (incident,) = [str(r["id"]) for r in watcher.state.incidents()]
    watcher.state.answer(incident, approve=True, who="alice", now=NOW + 20)
    for t in (NOW + 30, NOW + 40, NOW + 50):
        watcher.round(t)
    assert fixes == [], "approved, but the rails refuse: not acted"
    (waiting,) = _events(tmp_path, "approval_waiting")  # once, not every round
    assert waiting["by"] == "alice" and waiting["incident"] == incident
    assert waiting["verdict"] == ("breaker_open" if rail == "breaker" else "report"), waiting
    assert ("breaker open: by hand" if rail == "breaker" else "paused") in str(waiting["reason"])
    assert watcher.state.incidents()[0]["outcome"] == "wait_approval"

    watcher.state.reset_breaker()
    watcher.state.set_paused(False)
    watcher.round(NOW + 60)
    assert fixes == ["h1"], "the rails allow it now: acted"
    (acted,) = _events(tmp_path, "acted")
    assert acted["approved_by"] == "alice"
    watcher.close()
    watcher.state.close()


def test_an_approved_fix_past_the_cap_or_in_the_cooldown_waits(tmp_path: Path) -> None:
    fixes: list[str] = []
    policy = Policy(approval=True, cooldown_s=300.0, cap_per_day=2, breaker_percentage=None)
    fleet, watcher = _waiting_for_approval(tmp_path, policy, fixes)
    (incident,) = [str(r["id"]) for r in watcher.state.incidents()]
    watcher.state.save_history("h1", HostHistory(fixes=(NOW - 3000, NOW - 100)))  # the cap of 2 spent
    watcher.state.answer(incident, approve=True, who="alice", now=NOW + 20)
    watcher.round(NOW + 30)
    watcher.round(NOW + 40)
    assert fixes == []
    watcher.state.save_history("h1", HostHistory(fixes=(NOW - 100,)))  # one fix: the cooldown holds it
    for t in (NOW + 50, NOW + 60):  # its seconds left change, its reason does not: said once
        watcher.round(t)
    assert fixes == []
    reasons = [str(e["reason"]) for e in _events(tmp_path, "approval_waiting")]
    assert len(reasons) == 2 and "cap 2" in reasons[0] and reasons[1].startswith("cooling down"), reasons
    watcher.round(NOW + 210)  # the cooldown (300 s after NOW - 100) is over
    assert fixes == ["h1"]
    watcher.close()
    watcher.state.close()


def test_an_approval_expires(tmp_path: Path) -> None:
    """Asked and never answered, or approved but held by the rails past its time: ``expired``, closed,
    never acted; `approve` of it is refused in one line."""
    fixes: list[str] = []
    fleet, watcher = _waiting_for_approval(tmp_path, Policy(approval=True, approval_ttl_s=600.0), fixes)
    (incident,) = [str(r["id"]) for r in watcher.state.incidents()]
    watcher.round(NOW + 500)
    assert not _events(tmp_path, "outcome"), "inside its time it waits"
    watcher.round(NOW + 611)
    (expired,) = _events(tmp_path, "outcome")
    assert expired["outcome"] == "expired" and expired["incident"] == incident and expired["approval"] == "pending"
    row = watcher.state.incidents()[0]
    assert row["closed"] == 1 and row["outcome"] == "expired"
    with pytest.raises(ConfigError, match="expired"):
        watcher.state.answer(incident, approve=True, who="alice", now=NOW + 612)
    watcher.round(NOW + 620)
    assert fixes == []

    # Approved in time, then held by the breaker past the ttl: it expires too, never acted late.
    fleet.units["h2"].crash(NOW + 700)
    watcher.round(NOW + 701)
    second = str(watcher.state.incidents()[0]["id"])
    watcher.state.trip_breaker("by hand")
    watcher.state.answer(second, approve=True, who="bob", now=NOW + 702)
    watcher.round(NOW + 703)
    watcher.round(NOW + 1302)
    watcher.state.reset_breaker()
    watcher.round(NOW + 1303)
    assert fixes == []
    assert [(e["incident"], e["approval"]) for e in _events(tmp_path, "outcome")][-1] == (second, "approved")
    watcher.close()
    watcher.state.close()


# -- the rails' clock ----------------------------------------------------------------------------------
def test_a_fix_stamped_in_the_future_still_holds_the_cooldown_and_the_cap(tmp_path: Path) -> None:
    """watch.db written by a run whose clock was 2 h ahead: its fix is clamped to now (said in the audit):
    the cooldown holds; two such fixes spend the cap. Without the clamp, both were outside every window."""
    fleet = Fleet(["h1", "h2", "h3", "h4"])
    fixes: list[str] = []
    state = WatchState(tmp_path)
    state.save_history("h1", HostHistory(fixes=(NOW + 7200,)))
    state.save_history("h2", HostHistory(fixes=(NOW + 7000, NOW + 7200)))
    state.close()
    watcher = _watcher(tmp_path, fleet, Policy(breaker_percentage=None), _fixed(fixes, fleet))
    watcher.round(NOW)
    fleet.units["h1"].crash(NOW + 5)
    fleet.units["h2"].crash(NOW + 5)
    watcher.round(NOW + 10)
    assert fixes == []
    verdicts = {e["host"]: (e["verdict"], e["reason"]) for e in _events(tmp_path, "decided")}
    assert verdicts["h1"][0] == "report" and "cooling down" in str(verdicts["h1"][1]), verdicts
    assert verdicts["h2"][0] == "needs_human" and "cap 2" in str(verdicts["h2"][1]), verdicts
    clamped = {e["host"]: e["clamped"] for e in _events(tmp_path, "clock")}
    assert clamped == {"h1": [NOW + 7200], "h2": [NOW + 7000, NOW + 7200]}
    assert watcher.state.history("h1").fixes == (NOW + 10,), "saved clamped: said once"
    watcher.close()
    watcher.state.close()


def test_the_round_clock_is_never_stepped_back() -> None:
    wall = iter([NOW])
    mono = iter([100.0, 101.0, 103.5, 103.5])
    clock = SteadyClock(wall=lambda: next(wall), monotonic=lambda: next(mono))  # the wall read once
    assert clock() == NOW + 1.0
    assert clock() == NOW + 3.5  # whatever the wall clock says now (a `date -s` an hour back)
    assert clock() == NOW + 3.5


# -- who approved ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "who"), [({"SUDO_USER": "alice"}, "alice"), ({"LOGNAME": "mallory", "USER": "mallory"}, None)]
)
def test_the_approver_is_the_real_user(tmp_path: Path, env: dict[str, str], who: str | None) -> None:
    """Through sudo: the person (``SUDO_USER``, root being the effective user); else the uid's account, never
    ``$LOGNAME`` (anyone sets it)."""
    import os
    import pwd

    from click.testing import CliRunner

    from remediate.cli import cli

    if os.geteuid() != 0 and "SUDO_USER" in env:
        pytest.skip("SUDO_USER is believed only from root")
    state = WatchState(tmp_path)
    state.request_approval("a1", "a1", "h1", NOW, 3600.0)
    state.close()
    clean = {"SUDO_USER": "", **env} if "SUDO_USER" not in env else env
    result = CliRunner().invoke(cli, ["watch", "approve", "a1", "--state-dir", str(tmp_path)], env=clean)
    assert result.exit_code == 0, result.output
    state = WatchState(tmp_path)
    assert state.approval("a1") == ("approved", who or pwd.getpwuid(os.getuid()).pw_name)
    state.close()


def test_approve_of_an_expired_approval_is_refused_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from remediate.cli import cli

    state = WatchState(tmp_path)
    state.request_approval("a1", "a1", "h1", 1000.0, 600.0)  # long past
    state.close()
    result = CliRunner().invoke(cli, ["watch", "approve", "a1", "--state-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"remediate: {tmp_path / 'watch.db'}: approval 'a1' expired (the policy's approval_ttl): nothing done"
    ]
