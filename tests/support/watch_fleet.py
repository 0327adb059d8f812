"""A watched fleet of scripted hosts: each host's unit (state and journal as ``systemctl show`` and
``journalctl -o json`` print them, crashed on demand), the real Watcher over them, fixes that record or wait."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from remediate.controller.watch_state import WatchState
from remediate.core.watch.policy import Policy
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.loop import Watcher
from remediate.models import CommandResult, HostResult
from tests.support.fake_transport import FakeTransport, show_output
from tests.support.hosts import watched_host

NOW = 1_800_000_000.0
OOM = ("cuda_oom_runtime",)


@dataclass
class Unit:
    """One host's sglang unit as ``systemctl show`` and its journal tell it; ``crash()`` kills it."""

    name: str
    n_restarts: int = 0
    is_failed: bool = False
    journal: list[dict[str, str]] = field(default_factory=list)
    polls: int = 0
    invocation: int = 1

    def crash(self, at: float = NOW) -> None:
        """The invocation's main process exits at ``at`` (systemd's line carries the invocation id)."""
        self.is_failed = True
        stamp = str(int(at * 1e6) + len(self.journal))
        line = "sglang.service: Main process exited, code=exited, status=1/FAILURE"
        self.journal.append({"__CURSOR": f"c{len(self.journal)}", "__REALTIME_TIMESTAMP": stamp, "MESSAGE": line,
                             "INVOCATION_ID": f"i{self.invocation}", "_PID": "1",
                             "UNIT": "sglang.service"})  # fmt: skip

    def restarted(self) -> None:
        self.is_failed = False
        self.invocation += 1

    def answer(self, command: str, stdin: str | None) -> CommandResult:
        self.polls += 1
        state = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"} if self.is_failed else {
            "ActiveState": "active", "SubState": "running", "Result": "success"}  # fmt: skip
        show = show_output({**state, "NRestarts": self.n_restarts, "InvocationID": f"i{self.invocation}",
                            "ExecMainStatus": 0})  # fmt: skip
        after = command.split("--after-cursor ")[1].split()[0].strip("'") if "--after-cursor" in command else None
        seen = [e["__CURSOR"] for e in self.journal]
        entries = self.journal[seen.index(after) + 1 :] if after in seen else self.journal
        return CommandResult(command, 0, show + "@@journal\n" + "".join(json.dumps(e) + "\n" for e in entries), "")


class Fleet:
    """Scripted hosts, one :class:`Unit` each, and their inventory entries (``connect`` is the watcher's)."""

    def __init__(self, names: list[str]) -> None:
        self.units = {n: Unit(n) for n in names}
        self.entries = [HostEntry(name=n, address="127.0.0.1", settings={"unit": "sglang.service"}) for n in names]

    def connect(self, entry: HostEntry) -> FakeTransport:
        return watched_host(entry.name, self.units[entry.name].answer)


def watcher(directory: Path, fleet: Fleet, policy: Policy, fix: object, kinds: tuple[str, ...] = OOM) -> Watcher:
    """A real Watcher over ``fleet`` whose diagnosis finds ``kinds`` and whose fix is ``fix``."""

    def diagnose(transport: object, entry: HostEntry) -> HostResult:
        return HostResult(host=entry.name, outcome="diagnosed", findings=tuple({"kind": k} for k in kinds))

    return Watcher(fleet.entries, fleet.connect, diagnose, fix, WatchState(directory), policy)  # type: ignore[arg-type]


def fixed(names: list[str], fleet: Fleet | None = None) -> object:
    """A fix that records the host's name and restarts its unit (in ``fleet``)."""

    def fix(entry: HostEntry) -> HostResult:
        names.append(entry.name)
        if fleet is not None:
            fleet.units[entry.name].restarted()
        return HostResult(host=entry.name, outcome="remediated")

    return fix


class Gate:
    """A fix that waits to be let go; records how many ran at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.running = 0
        self.most = 0
        self.go: dict[str, threading.Event] = {}
        self.began = threading.Condition(self.lock)

    def fix(self, entry: HostEntry) -> HostResult:
        with self.lock:
            self.started.append(entry.name)
            self.running += 1
            self.most = max(self.most, self.running)
            go = self.go.setdefault(entry.name, threading.Event())
            self.began.notify_all()
        assert go.wait(30), f"{entry.name} was never let go"
        with self.lock:
            self.running -= 1
        return HostResult(host=entry.name, outcome="remediated")

    def wait_started(self, n: int) -> None:
        with self.lock:
            assert self.began.wait_for(lambda: len(self.started) >= n, 30), self.started

    def release(self, name: str) -> None:
        with self.lock:
            self.go.setdefault(name, threading.Event()).set()
