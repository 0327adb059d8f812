"""A crash told by the engine's fatal line (fleet/watch/poll.py ``_told``) on the real loop over one scripted
host: a line alone (the server still answers) starts nothing; confirmed (its health silent) it is the crash,
decided at once, the lingering server ended before the fix; the old invocation's late exit folds, never a
second crash."""

from __future__ import annotations

import json
from pathlib import Path

from remediate.controller.watch_audit import read_events
from remediate.controller.watch_state import WatchState
from remediate.core.watch.policy import Policy
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.loop import Watcher
from remediate.models import CommandResult, HostResult
from tests.support.fake_transport import show_output
from tests.support.hosts import watched_host

NOW = 1_800_000_000.0
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB."


class Lingering:
    """An sglang 0.5.23 unit: ``oom()`` writes torch's line while the unit stays active (its handler lingers);
    ``exit()`` is systemd's exit line of that invocation a minute later; ``restarted()`` a new invocation."""

    def __init__(self) -> None:
        self.journal: list[dict[str, str]] = []
        self.invocation = 1
        self.down = False

    def _line(self, message: str, **fields: str) -> None:
        stamp = str(int(NOW * 1e6) + len(self.journal))
        self.journal.append({"__CURSOR": f"s=a;i={len(self.journal) + 1:x}", "__REALTIME_TIMESTAMP": stamp,
                             "MESSAGE": message, **fields})  # fmt: skip

    def oom(self) -> None:
        self._line(OOM, _PID="4242", _SYSTEMD_INVOCATION_ID=f"i{self.invocation}")

    def exit(self) -> None:
        self.down = True
        self._line("sglang.service: Main process exited, code=killed, status=9/KILL", _PID="1",
                   UNIT="sglang.service", INVOCATION_ID=f"i{self.invocation}")  # fmt: skip

    def restarted(self) -> None:
        self.down, self.invocation = False, self.invocation + 1

    def answer(self, command: str, stdin: str | None) -> CommandResult:
        state = {"ActiveState": "failed", "SubState": "failed"} if self.down else {
            "ActiveState": "active", "SubState": "running"}  # fmt: skip
        show = show_output({**state, "Result": "success", "NRestarts": 0, "InvocationID": f"i{self.invocation}",
                            "ExecMainStatus": 0})  # fmt: skip
        after = command.split("--after-cursor ")[1].split()[0].strip("'") if "--after-cursor" in command else None
        seen = [e["__CURSOR"] for e in self.journal]
        entries = self.journal[seen.index(after) + 1 :] if after in seen else self.journal
        return CommandResult(command, 0, show + "@@journal\n" + "".join(json.dumps(e) + "\n" for e in entries), "")


def _watcher(tmp: Path, unit: Lingering, silent: list[str | None], log: list[str], **kw: object) -> Watcher:
    entry = HostEntry(name="h1", address="127.0.0.1", settings={"unit": "sglang.service"})

    def confirm(transport: object, entry: HostEntry, name: str) -> str | None:
        log.append("confirm")
        return silent[0]

    def end(transport: object, name: str, invocation: str) -> str:
        log.append(f"end {invocation}")
        unit.down = True
        return "ended"

    def fix(entry: HostEntry) -> HostResult:
        log.append("fix")
        unit.restarted()
        return HostResult(host=entry.name, outcome="remediated")

    def diagnose(transport: object, entry: HostEntry) -> HostResult:
        return HostResult(host=entry.name, outcome="diagnosed", findings=({"kind": "cuda_oom_runtime"},))

    return Watcher([entry], lambda e: watched_host(e.name, unit.answer), diagnose, fix,
                   WatchState(tmp), Policy(breaker_percentage=None), confirm=confirm, end_lingering=end,
                   **kw)  # type: ignore[arg-type]  # fmt: skip


def _kinds(tmp: Path) -> list[str]:
    return [str(e["event"]) for e in read_events(tmp)]


def test_a_fatal_line_alone_starts_nothing(tmp_path: Path) -> None:
    unit, log = Lingering(), []
    watcher = _watcher(tmp_path, unit, [None], log)
    try:
        watcher.round(NOW)
        unit.oom()
        watcher.round(NOW + 1)
        watcher.round(NOW + 2)  # its lines again within RECHECK_S: not asked again
        assert log == ["confirm"] and "detected" not in _kinds(tmp_path) and "unconfirmed" in _kinds(tmp_path)
    finally:
        watcher.close()
        watcher.state.close()


def test_a_confirmed_line_is_the_crash_and_the_lingering_server_is_ended_before_the_fix(tmp_path: Path) -> None:
    unit, log = Lingering(), []
    watcher = _watcher(tmp_path, unit, ["/health silent for 1s"], log)
    try:
        watcher.round(NOW)
        unit.oom()
        watcher.round(NOW + 1)
        watcher._reap(NOW + 1, wait=30, every=True)
        assert log == ["confirm", "end i1", "fix"]
        (detected,) = [e for e in read_events(tmp_path) if e["event"] == "detected"]
        assert "cuda_oom line of the running invocation; /health silent" in str(detected["reason"])
        assert [c["key"] for c in detected["crashes"]] == ["i1"]  # type: ignore[union-attr]
        (outcome,) = [e for e in read_events(tmp_path) if e["event"] == "outcome"]
        assert outcome["outcome"] == "remediated" and outcome["lingering"] == "ended"
    finally:
        watcher.close()
        watcher.state.close()


def test_the_old_invocations_late_exit_folds_into_the_same_crash(tmp_path: Path) -> None:
    """Reported only (--dry-run): the server lingers, then exits by its own kill a minute later."""
    unit, log = Lingering(), []
    watcher = _watcher(tmp_path, unit, ["/health silent for 1s"], log, dry_run=True)
    try:
        watcher.round(NOW)
        unit.oom()
        watcher.round(NOW + 1)
        unit.exit()
        watcher.round(NOW + 66)
        kinds = _kinds(tmp_path)
        assert kinds.count("detected") == 1 and "late_exit" in kinds, kinds
        assert len(watcher.state.recent_crashes(0.0)) == 1, "counted once by the breaker"
        assert log == ["confirm"], "a dry run never ends the server"
    finally:
        watcher.close()
        watcher.state.close()
