"""A restarted watcher resolves the incident its SIGKILLed predecessor left ``remediating``: once, by the
transaction log or by re-running the same one-host fix; the cap counts the original fix only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediate.controller.watch_audit import read_events
from remediate.controller.watch_state import WatchState
from remediate.core.watch.incident import HostHistory, Incident, counted_fixes
from remediate.core.watch.policy import Policy
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.loop import Watcher
from remediate.models import HostResult

NOW = 1_800_000_000.0


def _left_remediating(directory: Path) -> None:
    """What a watcher SIGKILLed inside its fix leaves: the fix counted, the incident remediating, its pid."""
    state = WatchState(directory)
    state.save_history("h2", HostHistory(fixes=(NOW,)))
    state.save_incident(Incident("inc1", "h2", "sglang.service", NOW, NOW, 1, ("cuda_oom_runtime",)), "remediating")
    state.set_acting("inc1", "a-dead-watcher")
    state.close()


def _watcher(directory: Path, fixes: list[str], outcome: str) -> Watcher:
    def fix(entry: HostEntry) -> HostResult:
        fixes.append(entry.name)
        return HostResult(host=entry.name, outcome=outcome)

    def no_connect(entry: HostEntry) -> object:
        raise AssertionError("recovery needs no poll")

    hosts = [HostEntry(name="h2", address="127.0.0.1", settings={"unit": "sglang.service"})]
    return Watcher(hosts, no_connect, lambda t, e: HostResult(host=e.name), fix, WatchState(directory), Policy())  # type: ignore[arg-type]


def _log(path: Path, *events: str) -> None:
    stamp = "2027-01-15T08:00:00Z"  # NOW
    path.write_text("".join(json.dumps({"time": stamp, "host": "h2", "event": e}) + "\n" for e in events))


def _log_backups(path: Path, *events: tuple[str, str]) -> None:
    """Transaction records at NOW, each (event, the backup it names)."""
    stamp = "2027-01-15T08:00:00Z"
    path.write_text(
        "".join(json.dumps({"time": stamp, "host": "h2", "event": e, "backups": [b]}) + "\n" for e, b in events)
    )


@pytest.mark.parametrize(("recheck", "outcome"), [("unchanged", "remediated"), ("rolled_back", "rolled_back")])
def test_a_committed_fix_is_rechecked_once(tmp_path: Path, txlog: Path, recheck: str, outcome: str) -> None:
    _left_remediating(tmp_path)
    _log(txlog, "committed")
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fixes, recheck)
    watcher._recover(NOW + 5)
    watcher._recover(NOW + 6)  # resolved: a second round finds nothing to do
    assert fixes == ["h2"]
    events = read_events(tmp_path)
    assert [e["event"] for e in events] == ["recovered", "outcome"]
    assert events[0]["step"] == "recheck" and events[0]["logged"] == ["committed"]
    assert events[1]["outcome"] == outcome and events[1]["recheck"] == recheck
    row = watcher.state.incidents()[0]
    assert row["closed"] == 1 and row["outcome"] == outcome
    assert counted_fixes(watcher.state.history("h2"), NOW + 6) == 1, "the original fix counts; no second count"
    assert watcher.state.acting("inc1") is None


def test_a_logged_rollback_is_read_back_not_refixed(tmp_path: Path, txlog: Path) -> None:
    _left_remediating(tmp_path)
    _log(txlog, "committed", "rolled_back")
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fixes, "remediated")
    watcher._recover(NOW + 5)
    assert fixes == [], "the host rolled itself back: no second fix"
    assert [e.get("outcome") for e in read_events(tmp_path)] == [None, "rolled_back"]
    assert watcher.state.incidents()[0]["outcome"] == "rolled_back"


def test_older_transactions_of_the_host_are_not_this_fix(tmp_path: Path, txlog: Path) -> None:
    _left_remediating(tmp_path)
    txlog.write_text(json.dumps({"time": "2027-01-15T07:00:00Z", "host": "h2", "event": "rolled_back"}) + "\n")
    fixes: list[str] = []
    _watcher(tmp_path, fixes, "unchanged")._recover(NOW + 5)
    assert fixes == ["h2"]


def test_a_watcher_dead_before_acting_has_its_fix_counted_once(tmp_path: Path, txlog: Path) -> None:
    """Killed between `decided` and `acted`: no pid, nothing counted, nothing committed: the one fix is
    made by the recovery and counted there."""
    state = WatchState(tmp_path)
    state.save_incident(Incident("inc1", "h2", "sglang.service", NOW, NOW, 1, ("cuda_oom_runtime",)), "remediating")
    state.close()
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fixes, "remediated")
    watcher._recover(NOW + 5)
    watcher._recover(NOW + 6)
    assert fixes == ["h2"]
    assert counted_fixes(watcher.state.history("h2"), NOW + 6) == 1
    assert watcher.state.incidents()[0]["outcome"] == "remediated"


def test_a_failed_recheck_puts_the_killed_fixs_backup_back(tmp_path: Path, txlog: Path) -> None:
    _left_remediating(tmp_path)
    backup = "/etc/systemd/system/sglang.service.bak.oom.1"
    _log_backups(txlog, ("committed", backup))
    fixes: list[str] = []
    undone: list[str] = []
    watcher = _watcher(tmp_path, fixes, "failed")

    def undo(entry: HostEntry, path: str) -> HostResult:
        undone.append(path)
        return HostResult(host=entry.name, outcome="restored")

    watcher.undo = undo
    watcher._recover(NOW + 5)
    assert fixes == ["h2"] and undone == [backup]
    events = read_events(tmp_path)
    assert [e["event"] for e in events] == ["recovered", "undo", "outcome"]
    assert events[2]["outcome"] == "rolled_back" and events[2]["recheck"] == "failed"
    assert counted_fixes(watcher.state.history("h2"), NOW + 6) == 1


def test_a_dry_run_watcher_leaves_it_for_a_real_one(tmp_path: Path, txlog: Path) -> None:
    _left_remediating(tmp_path)
    _log(txlog, "committed")
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fixes, "unchanged")
    watcher.dry_run = True
    watcher._recover(NOW + 5)
    assert fixes == [] and read_events(tmp_path) == []
    assert watcher.state.incidents()[0]["outcome"] == "remediating"


def test_a_fix_whose_host_state_is_unknown_is_rechecked_not_closed_failed(tmp_path: Path, txlog: Path) -> None:
    """The connection was lost after the commit and not re-established (the chaos run: two cuts in a row, mid
    health wait): the fix's result is ``failed`` but the host holds the new bytes; the incident stays
    ``remediating`` and the next round's recovery re-runs the same fix, which finds it healthy."""
    _left_remediating(tmp_path)
    _log(txlog, "committed", "unknown")
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fixes, "unchanged")
    h = watcher._hosts["h2 sglang.service"]
    watcher._finish(h, "inc1", NOW + 1, HostResult(host="h2", outcome="failed", error="whether ... is unknown"))
    assert watcher.state.incidents()[0]["outcome"] == "remediating" and watcher.state.acting("inc1") == "cut"
    assert not read_events(tmp_path), "no outcome yet"
    watcher._recover(NOW + 5)
    assert fixes == ["h2"]
    assert [(e["event"], e.get("outcome")) for e in read_events(tmp_path)] == [
        ("recovered", None),
        ("outcome", "remediated"),
    ]
    assert counted_fixes(watcher.state.history("h2"), NOW + 6) == 1


def test_a_failed_fix_with_a_known_end_is_closed_failed(tmp_path: Path, txlog: Path) -> None:
    _left_remediating(tmp_path)
    _log(txlog, "committed", "failed")
    watcher = _watcher(tmp_path, [], "unchanged")
    watcher._finish(watcher._hosts["h2 sglang.service"], "inc1", NOW + 1, HostResult(host="h2", outcome="failed"))
    assert watcher.state.incidents()[0]["outcome"] == "failed"


def test_an_undo_that_loses_the_host_is_tried_again_not_closed_failed(tmp_path: Path, txlog: Path) -> None:
    """The chaos run (seed 22): the recovery's re-check fails (the fixed server never starts), its undo's
    connection is cut before the restore; closing ``failed`` then left the new bytes crash-looping for good.
    The incident stays ``remediating`` (acting ``undo``), the host waits out the backoff, and the next
    recovery puts the backup back — without a second re-check."""
    _left_remediating(tmp_path)
    backup = "/etc/systemd/system/sglang.service.bak.oom.1"
    _log_backups(txlog, ("committed", backup))
    fixes: list[str] = []
    answers = [
        HostResult(host="h2", outcome="failed", error="h2: connection lost (EOF from the server)", exit_code=3),
        HostResult(host="h2", outcome="unchanged"),  # the first undo got as far as the bytes: undone all the same
    ]
    undone: list[str] = []

    def undo(entry: HostEntry, path: str) -> HostResult:
        undone.append(path)
        return answers.pop(0)

    watcher = _watcher(tmp_path, fixes, "failed")
    watcher.undo = undo
    watcher._recover(NOW + 5)
    assert fixes == ["h2"] and undone == [backup]
    assert watcher.state.incidents()[0]["outcome"] == "remediating" and watcher.state.acting("inc1") == "undo"
    h = watcher._hosts["h2 sglang.service"]
    watcher._recover(h.retry_at - 0.1)  # inside the backoff: the host is not tried
    assert undone == [backup]
    watcher._recover(h.retry_at)
    assert fixes == ["h2"], "no second re-check: straight to the undo"
    assert undone == [backup, backup]
    events = read_events(tmp_path)
    assert [(e["event"], e.get("step") or e.get("next") or e.get("outcome")) for e in events] == [
        ("recovered", "recheck"),
        ("undo", None),
        ("unreachable", "undo"),
        ("recovered", "undo"),
        ("undo", None),
        ("outcome", "rolled_back"),
    ]
    assert watcher.state.incidents()[0]["outcome"] == "rolled_back"
    assert counted_fixes(watcher.state.history("h2"), NOW + 6) == 1


def test_a_recheck_that_loses_the_host_is_rechecked_later(tmp_path: Path, txlog: Path) -> None:
    _left_remediating(tmp_path)
    _log(txlog, "committed")
    fixes: list[str] = []
    watcher = _watcher(tmp_path, fixes, "unreachable")
    watcher._recover(NOW + 5)
    assert watcher.state.acting("inc1") == "cut" and watcher.state.incidents()[0]["outcome"] == "remediating"
    h = watcher._hosts["h2 sglang.service"]

    def healthy(entry: HostEntry) -> HostResult:
        fixes.append(entry.name)
        return HostResult(host=entry.name, outcome="unchanged")

    watcher.fix = healthy
    watcher._recover(h.retry_at)
    assert fixes == ["h2", "h2"] and watcher.state.incidents()[0]["outcome"] == "remediated"
    assert counted_fixes(watcher.state.history("h2"), NOW + 6) == 1


def test_a_fix_whose_own_undo_lost_the_host_has_its_undo_finished(tmp_path: Path, txlog: Path) -> None:
    """The fixed server failed, the transaction began its own rollback (``rolling_back``) and the connection
    died there (exit 3, logged ``failed``): not closed ``failed`` on the new bytes; the next recovery puts the
    fix's backup back, with no second re-check."""
    _left_remediating(tmp_path)
    backup = "/etc/systemd/system/sglang.service.bak.oom.1"
    _log_backups(txlog, *((e, backup) for e in ("committing", "committed", "rolling_back", "failed")))
    fixes: list[str] = []
    undone: list[str] = []
    watcher = _watcher(tmp_path, fixes, "unchanged")

    def undo(entry: HostEntry, path: str) -> HostResult:
        undone.append(path)
        return HostResult(host=entry.name, outcome="restored")

    watcher.undo = undo
    lost = HostResult(host="h2", outcome="failed", error="h2: connection lost (EOF from the server)", exit_code=3)
    watcher._finish(watcher._hosts["h2 sglang.service"], "inc1", NOW + 1, lost)
    assert watcher.state.acting("inc1") == "cut" and not read_events(tmp_path)
    watcher._recover(NOW + 5)
    assert fixes == [] and undone == [backup]
    events = read_events(tmp_path)
    assert [(e["event"], e.get("step") or e.get("outcome")) for e in events] == [
        ("recovered", "undo"),
        ("undo", None),
        ("outcome", "rolled_back"),
    ]
