"""The watcher SIGKILLed inside its fix's health wait, then started again: the host ends remediated with
one commit and one backup (the restarted watcher reads the transaction back and re-checks it with the same
`oom` transaction, which finds it done), and the audit log tells detected → … → acted → recovered → outcome.
And the rails end to end: a second crash inside the cooldown is reported, not fixed; past the daily cap the
host is `needs_human`, left alone, and `watch status --json` says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from remediate.controller.watch_state import WatchState
from remediate.core.watch.incident import counted_fixes
from tests.support.node import FAST_KNOBS, UNIT_PATH, Node, poll
from tests.support.watch import crash_32k as _crash
from tests.support.watch import watch_events as _events
from tests.support.watch import watch_once as _watch

pytestmark = pytest.mark.e2e
CHANGING = ("daemon-reload", "reset-failed", "restart", "start", "stop")


def _transactions(node: Node) -> list[dict[str, object]]:
    path = Path(os.environ["REMEDIATE_STATE_DIR"]) / "transactions.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r.get("host") == node.host.name]


def _changing(node: Node) -> list[str]:
    """What the host's systemctl audit shows that changes a unit (the sandbox records every call)."""
    return [line for line in node.audit() if line.split(" ", 1)[0] in CHANGING]


PIDNS = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")  # PID 1 of its own pid namespace


def _kill_after_the_commit(node: Node, state: Path, *, prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    """The watcher as a subprocess, SIGKILLed (by PID) once its fix's commit is logged: in the health wait.
    ``prefix``: PIDNS runs it as PID 1 of a pid namespace (unshare's ``--kill-child`` SIGKILLs it with unshare)."""
    argv = [*prefix, *node.argv("watch", "--once", "--state-dir", str(state), "--wait-timeout", "60")]
    proc = subprocess.Popen(argv, cwd=node.tmp_path, env=node.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
    node.children.append(proc)
    poll(lambda: [r for r in _transactions(node) if r["event"] == "committed"], deadline=120, what="the commit")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return proc


def test_sigkill_in_the_health_wait_then_restart(incident: Node, tmp_path: Path) -> None:
    node, state = incident, tmp_path / "watch-state"
    original = node.bytes(UNIT_PATH)
    assert _watch(node, state).returncode == 0  # the cursor
    _crash(node)
    node.host.set_standin(time_scale=0.01)  # the fixed server loads in ~4.5 s: the kill lands in the health wait
    proc = _kill_after_the_commit(node, state)
    assert [r["event"] for r in _transactions(node)] == ["committing", "committed"], (
        "killed before the health wait ended"
    )
    killed = _events(state)
    assert [e["event"] for e in killed] == ["detected", "diagnosed", "decided", "acted"], killed
    assert WatchState(state).incidents()[0]["outcome"] == "remediating"

    node.host.set_standin(**FAST_KNOBS)
    restarts = _changing(node).count("restart sglang.service")
    run = _watch(node, state)
    assert run.returncode == 0, run
    events = _events(state)
    assert [e["event"] for e in events] == ["detected", "diagnosed", "decided", "acted", "recovered", "outcome"]
    assert _changing(node).count("restart sglang.service") == restarts, "the loading server was waited for"
    recovered, outcome = events[4], events[5]
    assert recovered["acting"] == killed[3]["instance"] and killed[3]["pid"] == proc.pid, (recovered, killed)
    assert recovered["step"] == "recheck", recovered
    assert outcome["outcome"] == "remediated" and outcome["recheck"] in ("unchanged", "drift"), outcome
    assert node.bytes(UNIT_PATH) != original
    node.wait_healthy()
    assert node.generate(32768, 3).status == 200, "the fix holds: the request that crashed it succeeds"
    assert len(node.backups(UNIT_PATH)) == 1, "one backup: the fix was not made twice"
    assert [r["event"] for r in _transactions(node)].count("committed") == 1, _transactions(node)
    db = WatchState(state)
    try:
        row = db.incidents()[0]
        assert len(db.incidents()) == 1 and row["closed"] == 1 and row["outcome"] == "remediated"
        history = db.history(node.host.name)
        assert len(history.fixes) == 1 and counted_fixes(history, float(history.fixes[0])) == 1
    finally:
        db.close()


def test_two_watchers_as_pid_1_recover_the_killed_fix_once(incident: Node, tmp_path: Path) -> None:
    """Both watchers PID 1 of their own pid namespace (a container's, a deterministic boot's): the second
    still knows the fix is a dead watcher's (another instance) and recovers it, once."""
    node, state = incident, tmp_path / "watch-state"
    assert _watch(node, state).returncode == 0
    _crash(node)
    node.host.set_standin(time_scale=0.01)  # the kill lands in the fix's health wait
    _kill_after_the_commit(node, state, prefix=PIDNS)
    killed = _events(state)
    assert [e["event"] for e in killed] == ["detected", "diagnosed", "decided", "acted"], killed
    assert killed[3]["pid"] == 1, "the first watcher was PID 1"

    node.host.set_standin(**FAST_KNOBS)
    argv = [*PIDNS, *node.argv("watch", "--once", "--state-dir", str(state), "--wait-timeout", "60")]
    run = subprocess.run(argv, cwd=node.tmp_path, env=node.env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    events = _events(state)
    assert [e["event"] for e in events] == ["detected", "diagnosed", "decided", "acted", "recovered", "outcome"]
    assert events[4]["acting"] == killed[3]["instance"] and events[4]["step"] == "recheck", events[4]
    assert events[5]["outcome"] == "remediated", events[5]
    again = subprocess.run(argv, cwd=node.tmp_path, env=node.env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert [e["event"] for e in _events(state)].count("recovered") == 1, "recovered once"
    assert [r["event"] for r in _transactions(node)].count("committed") == 1, "the fix was made once"
    assert len(node.backups(UNIT_PATH)) == 1


def _fix_killed_after_its_commit(node: Node, state: Path) -> bytes:
    """The incident's crash, the watcher's fix killed after its commit (a slow load); the unit's original bytes."""
    original = node.bytes(UNIT_PATH)
    assert _watch(node, state).returncode == 0
    _crash(node)
    node.host.set_standin(time_scale=0.01)
    _kill_after_the_commit(node, state)
    node.host.set_standin(**FAST_KNOBS)
    return original


def test_a_fix_a_person_rolled_back_is_not_redone(incident: Node, tmp_path: Path) -> None:
    """The watcher killed in its fix's health wait; a person then rolls the unit back: the next watcher
    closes the incident ``rolled_back_by_person`` and makes no fix (the person's bytes stay)."""
    node, state = incident, tmp_path / "watch-state"
    original = _fix_killed_after_its_commit(node, state)
    back = node.cli("rollback", "--wait-timeout", "60")
    assert back.returncode == 0, back
    assert node.bytes(UNIT_PATH) == original
    changes = _changing(node)
    run = _watch(node, state)
    assert run.returncode == 0, run
    events = _events(state)
    assert [e["event"] for e in events][-2:] == ["recovered", "outcome"], events
    assert events[-2]["step"] == "rolled_back_by_person" and events[-1]["outcome"] == "rolled_back_by_person"
    assert node.bytes(UNIT_PATH) == original and _changing(node) == changes, "no fix made again"
    row = WatchState(state).incidents()[0]
    assert row["closed"] == 1 and row["outcome"] == "rolled_back_by_person"


def test_a_fix_rolled_back_from_another_controller_is_not_redone(incident: Node, tmp_path: Path) -> None:
    """As above, but the person's `rollback` ran from another controller (its own state directory): this
    controller's transaction log has no `restored`, and the unit's bytes on the host (its fix's backup's
    again) are what says the fix was undone: closed ``rolled_back_by_person``, nothing made again."""
    node, state = incident, tmp_path / "watch-state"
    original = _fix_killed_after_its_commit(node, state)
    elsewhere = {**node.env(), "REMEDIATE_STATE_DIR": str(tmp_path / "other-controller")}
    back = subprocess.run(node.argv("rollback", "--wait-timeout", "60"), cwd=node.tmp_path, env=elsewhere,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert back.returncode == 0, back.stderr
    assert node.bytes(UNIT_PATH) == original
    assert "restored" not in [r["event"] for r in _transactions(node)], "no record of it here"
    changes = _changing(node)
    run = _watch(node, state)
    assert run.returncode == 0, run
    events = _events(state)
    assert [e["event"] for e in events][-2:] == ["recovered", "outcome"], events
    assert events[-2]["step"] == "rolled_back_by_person" and events[-1]["outcome"] == "rolled_back_by_person"
    assert node.bytes(UNIT_PATH) == original and _changing(node) == changes, "no fix made again"


def test_sigkill_while_the_new_server_cannot_start(incident: Node, tmp_path: Path) -> None:
    """The fixed server dies at once on every start (exit_at_once, matched on the fix's chunked prefill):
    the re-check fails (a re-run with nothing to write cannot undo), so the killed attempt's own backup is
    restored, verified: rolled back, the old server healthy, one oom backup."""
    node, state = incident, tmp_path / "watch-state"
    original = node.bytes(UNIT_PATH)
    assert _watch(node, state).returncode == 0
    _crash(node)
    node.host.set_standin(time_scale=0.01, failure="exit_at_once", failure_match="--chunked-prefill-size 4096")
    _kill_after_the_commit(node, state)
    run = _watch(node, state)
    assert run.returncode == 0, run
    events = _events(state)
    assert [e["event"] for e in events][:7] == [
        "detected", "diagnosed", "decided", "acted", "recovered", "undo", "outcome"
    ], events  # fmt: skip
    assert events[5]["recheck"] == "failed", events[5]  # the re-run had nothing to write: it could not undo
    assert events[6]["outcome"] == "rolled_back" and events[6]["recheck"] == "failed", events[6]
    assert [e for e in events if e["event"] == "acted"] == [events[3]], "no second fix"
    assert node.bytes(UNIT_PATH) == original, "the killed fix's own backup put back"
    node.wait_healthy()
    assert len(node.backups(UNIT_PATH)) == 1, "one oom backup: the fix was made once"
    committed = [r for r in _transactions(node) if r["event"] == "committed" and r["backups"]]
    assert [str(r["backups"][0]).split(".bak.")[1].split(".")[0] for r in committed] == ["oom", "rollback"]  # type: ignore[index]


def test_sigkill_while_the_fix_rolls_itself_back(incident: Node, tmp_path: Path) -> None:
    """The fixed server cannot start, the fix's own rollback has put the old bytes back and waits for the old
    server, and the watcher is SIGKILLed there (the chaos run, seed 18): the next watcher finds the old bytes
    after the log's written-ahead ``rolling_back`` — the fix's own undo, closed ``rolled_back``, never
    ``rolled_back_by_person``, and nothing run again."""
    node, state = incident, tmp_path / "watch-state"
    original = node.bytes(UNIT_PATH)
    assert _watch(node, state).returncode == 0
    _crash(node)
    node.host.set_standin(time_scale=0.01, failure="exit_at_once", failure_match="--chunked-prefill-size 4096")
    argv = node.argv("watch", "--once", "--state-dir", str(state), "--wait-timeout", "60")
    proc = subprocess.Popen(argv, cwd=node.tmp_path, env=node.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
    node.children.append(proc)
    poll(lambda: [r for r in _transactions(node) if r["event"] == "rolling_back"], deadline=120, what="the undo")
    poll(lambda: node.bytes(UNIT_PATH) == original, deadline=60, what="the old bytes back on the host")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert "rolled_back" not in [r["event"] for r in _transactions(node)], "killed before its end was logged"
    run = _watch(node, state)
    assert run.returncode == 0, run
    events = _events(state)
    recovered = [e for e in events if e["event"] == "recovered"]
    assert [e["step"] for e in recovered] == ["rolled_back"], events
    outcome = [e for e in events if e["event"] == "outcome"][0]
    assert outcome["outcome"] == "rolled_back", outcome
    assert len([e for e in events if e["event"] == "acted"]) == 1 and "undo" not in [e["event"] for e in events]
    assert node.bytes(UNIT_PATH) == original
    node.wait_healthy()


def test_cooldown_then_cap(incident: Node, tmp_path: Path) -> None:
    node, state = incident, tmp_path / "watch-state"
    policy = tmp_path / "policy.yaml"
    policy.write_text("cap_per_day: 2\n")  # the default cooldown (1h) holds the second crash
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    _crash(node)
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    assert _events(state)[-1]["outcome"] == "remediated"

    node.install_incident()  # a person puts the crashing flags back; the 32k prefill kills it again
    assert node.host.systemctl("restart", "sglang.service").returncode == 0
    node.wait_healthy()
    _crash(node)
    before = (node.bytes(UNIT_PATH), _changing(node))
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    decided = _events(state)[-1]
    assert decided["event"] == "decided" and decided["verdict"] == "report", decided
    assert "cooling down" in str(decided["reason"])
    assert (node.bytes(UNIT_PATH), _changing(node)) == before, "inside the cooldown: reported, not fixed"

    # The cap of one is spent (the cap is weighed before the cooldown); a short fold window makes the next
    # crash a new incident instead of one more crash of the reported one.
    policy.write_text("cap_per_day: 1\nfold_window: 1ms\n")
    assert node.host.systemctl("restart", "sglang.service").returncode == 0
    node.wait_healthy()
    _crash(node)
    before = (node.bytes(UNIT_PATH), _changing(node))
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    decided = _events(state)[-1]
    assert decided["event"] == "decided" and decided["verdict"] == "needs_human", decided
    assert (node.bytes(UNIT_PATH), _changing(node)) == before, "needs_human: left alone"
    status = node.cli("watch", "--json", "--state-dir", str(state), target="status", ssh_config=False,
                      json_out=False)  # fmt: skip
    doc = json.loads(status.stdout)
    assert doc["hosts"] == {node.host.name: "needs_human"}, doc
    assert doc["incidents"][0]["outcome"] == "needs_human"
