"""What the watcher's parts share without importing the loop: one watched unit's record
(:class:`WatchedHost`) and the narrow view of the Watcher that the poll (poll.py), the fix pool (fixes.py)
and unit discovery (units.py) use (:class:`WatcherView`): loop.py imports them, never the other way."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from remediate.controller.watch_state import WatchState
from remediate.core.watch.decide import FleetView
from remediate.core.watch.detect import CrashTime, Observation
from remediate.core.watch.policy import Policy
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.follow import Follower
from remediate.fleet.watch.metrics import WatchMetrics
from remediate.models import HostResult
from remediate.transport.base import Transport

Fix = Callable[[HostEntry], HostResult]
Undo = Callable[[HostEntry, str], HostResult]  # restore this backup on the host (`rollback --to`)


def host_key(host: str, unit: str) -> str:
    """A watched (host, unit)'s key: a host runs several engine units, each watched as its own."""
    return f"{host} {unit}"


@dataclass
class WatchedHost:
    """One watched (host, unit): its kept connection, what its last poll saw, its crash bookkeeping."""

    entry: HostEntry  # as polled: its address and ssh settings, its ``unit`` setting the unit watched
    unit: str  # "" until the host's first connection found its engine unit(s) (no unit named)
    transport: Transport | None = None
    previous: Observation | None = None
    state: str = "unknown"
    retry_at: float = 0.0
    failures: int = 0
    follower: Follower | None = None
    polled_at: float = float("-inf")
    crash_cursor: str | None = None  # the journal past a crash: saved with its decision, not before
    crashes: tuple[CrashTime, ...] = ()  # the crashes the last poll found, each with its own time and key
    counted: list[dict[str, object]] = field(default_factory=list)  # the same, as the audit says them
    no_unit: str | None = None  # why no unit is watched here (none found, or the named one does not exist)
    early: list[str] = field(default_factory=list)  # invocations whose crash was told by a fatal line (newest last)
    lingering: str | None = None  # the crashed invocation still running (its server in its crash handler)
    suspected_at: dict[str, float] = field(default_factory=dict)  # invocation → when a fatal line was not confirmed
    ended: str | None = None  # what ending the lingering process found (fleet/watch/fixes.py)

    @property
    def key(self) -> str:
        return host_key(self.entry.name, self.unit)


class WatcherView(Protocol):
    """The Watcher (loop.py) as its parts see it: the poll, the fixes, units, the rails, the recovery."""

    state: WatchState
    policy: Policy
    dry_run: bool
    follow: bool
    instance: str
    metrics: WatchMetrics | None
    _hosts: dict[str, WatchedHost]
    _running: dict[str, tuple[Future[HostResult], str]]
    _pool: ThreadPoolExecutor | None
    _woken: set[str]
    _approval_waits: dict[str, str]
    _wake: threading.Condition

    @property
    def connect(self) -> Callable[[HostEntry], Transport]: ...

    @property
    def fix(self) -> Fix: ...

    @property
    def alive(self) -> Callable[[], None]: ...

    @property
    def confirm(self) -> Callable[[Transport, HostEntry, str], str | None] | None: ...

    @property
    def end_lingering(self) -> Callable[[Transport, str, str], str] | None: ...

    @property
    def warn(self) -> Callable[[str], None] | None: ...

    @property
    def undo(self) -> Undo | None: ...

    def fleet_view(self, now: float) -> FleetView: ...

    def _act(self, h: WatchedHost, incident_id: str, now: float, approved_by: str | None) -> None: ...

    def _run_fix(self, h: WatchedHost) -> HostResult: ...

    def _finish(
        self, h: WatchedHost, incident_id: str, now: float, result: HostResult, recheck: str | None = None
    ) -> None: ...

    def event(self, kind: str, now: float, **data: Any) -> None: ...

    def woken(self, host: str) -> None: ...

    def _unfollow(self, h: WatchedHost) -> None: ...

    def _close(self, incident_id: str, host: str, unit: str, outcome: str) -> None: ...
