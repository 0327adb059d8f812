"""A watcher killed between a crash's `detected` and its decision (found by the chaos run: the crash was lost,
its journal cursor already saved): the cursor past a crash is saved with the crash's decision, so the next
watcher on the state reads the same journal again and decides the crash once."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from remediate.controller.watch_audit import read_events
from remediate.controller.watch_state import WatchState
from remediate.core.watch.policy import Policy
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.loop import Watcher
from remediate.models import HostResult

NOW = 1_800_000_000.0
UNIT = "sglang.service"
SHOW = (
    "ActiveState=active\nSubState=running\nResult=success\nNRestarts={n}\nInvocationID={inv}\n"
    "ExecMainStatus=0\nMainPID=7\n"
)


class _Host:
    """The host's answer to a poll: the unit (restarted by its own Restart=) and its journal after a cursor."""

    def __init__(self) -> None:
        self.n_restarts, self.invocation = 0, "a"
        self.journal: list[dict[str, str]] = [{"__CURSOR": "c0", "__REALTIME_TIMESTAMP": "1", "MESSAGE": "ready"}]

    def crash(self) -> None:
        exited = "sglang.service: Main process exited, code=exited, status=1/FAILURE"
        self.journal.append({"__CURSOR": "c1", "__REALTIME_TIMESTAMP": "2", "MESSAGE": exited, "_PID": "1",
                             "UNIT": "sglang.service"})  # fmt: skip
        self.n_restarts, self.invocation = 1, "b"

    def run(self, command: str, timeout: float) -> SimpleNamespace:
        after = command.split("--after-cursor ")[1].split()[0].strip("'") if "--after-cursor" in command else None
        cursors = [e["__CURSOR"] for e in self.journal]
        entries = self.journal[cursors.index(after) + 1 :] if after in cursors else self.journal
        show = SHOW.format(n=self.n_restarts, inv=self.invocation)
        return SimpleNamespace(stdout=show + "@@journal\n" + "".join(json.dumps(e) + "\n" for e in entries))

    def close(self) -> None:
        pass


class _Killed(BaseException):
    """Stands for SIGKILL inside the diagnosis: nothing after it runs."""


def _watcher(directory: Path, host: _Host, diagnose: object) -> Watcher:
    entry = HostEntry(name="h1", address="127.0.0.1", settings={"unit": "sglang.service"})
    policy = Policy(fixed_kinds=frozenset({"cuda_oom_runtime"}))
    return Watcher([entry], lambda e: host, diagnose, lambda e: HostResult(host=e.name), WatchState(directory),  # type: ignore[arg-type]
                   policy)  # fmt: skip


def test_a_crash_whose_watcher_died_before_deciding_is_found_again(tmp_path: Path) -> None:
    host = _Host()
    first = _watcher(tmp_path, host, lambda t, e: HostResult(host=e.name))
    first.round(NOW)  # healthy: the cursor is saved
    host.crash()

    def killed(t: object, e: HostEntry) -> HostResult:
        raise _Killed

    first.diagnose = killed  # type: ignore[assignment]
    with pytest.raises(_Killed):
        first.round(NOW + 1)
    assert [e["event"] for e in read_events(tmp_path)] == ["detected"]
    assert first.state.cursor("h1", UNIT) == "c0", "the cursor past the crash is not saved before its decision"
    first.state.close()

    second = _watcher(tmp_path, host, lambda t, e: HostResult(host=e.name))
    second.round(NOW + 2)
    second.round(NOW + 3)  # decided once: the next round finds nothing new
    events = [e["event"] for e in read_events(tmp_path)]
    assert events == ["detected", "detected", "diagnosed", "decided"], events
    assert second.state.cursor("h1", UNIT) == "c1"
    assert len(second.state.incidents()) == 1


def test_a_fix_cut_before_its_commit_is_run_again_by_the_next_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection cut under a fix before its commit (the chaos run's cut mid-fix: outcome `unreachable`):
    the incident is not closed `unreachable`; the next round's recovery runs the same fix again, counted once."""
    from remediate.core.watch.incident import counted_fixes

    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(tmp_path / "controller"))
    host = _Host()
    outcomes = ["unreachable", "remediated"]
    oom = {"kind": "cuda_oom_runtime"}
    watcher = _watcher(tmp_path, host, lambda t, e: HostResult(host=e.name, findings=(oom,)))
    watcher.fix = lambda e: HostResult(host=e.name, outcome=outcomes.pop(0))  # type: ignore[assignment]
    watcher.round(NOW)
    host.crash()
    watcher.round(NOW + 1)
    watcher._reap(NOW + 1, wait=30, every=True)  # the fix runs on the pool: the next round records it
    assert watcher.state.incidents()[0]["outcome"] == "remediating", "a cut fix is not an end"
    watcher.round(NOW + 2)
    events = [(e["event"], e.get("outcome") or e.get("step")) for e in read_events(tmp_path)]
    assert events[-3:] == [("acted", None), ("recovered", "recheck"), ("outcome", "remediated")], events
    row = watcher.state.incidents()[0]
    assert row["outcome"] == "remediated" and row["closed"] == 1 and outcomes == []
    assert counted_fixes(watcher.state.history("h1"), NOW + 2) == 1, "the fix counts once"
