"""The watcher's round: poll each host (one persistent connection each), fold a crash into an incident,
diagnose it, decide under the rails (core/watch/decide.py) and act through the ``fix`` the api hands in
(the normal `oom` transaction for that one host). The state is in controller/watch_state.py, every event
in the audit log."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from remediate.controller.watch_audit import append_event
from remediate.controller.watch_state import WatchState
from remediate.core.watch.decide import Decision, FleetView, breaker_crossing, decide
from remediate.core.watch.incident import (
    Crash,
    Incident,
    fold,
    note_crash,
)
from remediate.core.watch.policy import Policy
from remediate.errors import RemediateError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.fixes import act, finish, reap, run_fix
from remediate.fleet.watch.host import Fix, Undo, WatchedHost, host_key
from remediate.fleet.watch.metrics import WatchMetrics
from remediate.fleet.watch.poll import poll
from remediate.fleet.watch.rails import answered, history_at
from remediate.fleet.watch.recover import recover
from remediate.fleet.watch.sdnotify import kept_alive
from remediate.fleet.watch.units import discover, fixing
from remediate.models import HostResult
from remediate.transport.base import Transport

REDECIDED = ("report", "wait")  # an open incident in these is decided again when a crash folds into it

Diagnose = Callable[[Transport, HostEntry], HostResult]


@dataclass
class Watcher:
    """One watcher over ``hosts``; ``connect(entry)`` gives a host's transport (opened lazily, kept)."""

    hosts: list[HostEntry]
    connect: Callable[[HostEntry], Transport]
    diagnose: Diagnose
    fix: Fix
    state: WatchState
    policy: Policy
    dry_run: bool = False
    notify: Callable[[dict[str, Any]], None] | None = None
    metrics: WatchMetrics | None = None
    undo: Undo | None = None
    warn: Callable[[str], None] | None = None  # one line for a person (stderr): a host with no unit to watch
    on_event: Callable[[dict[str, Any]], None] | None = None  # every audit record once written (the terminal's lines)
    _hosts: dict[str, WatchedHost] = field(default_factory=dict)  # host_key(host, unit) → the watched unit
    _running: dict[str, tuple[Future[HostResult], str]] = field(default_factory=dict)  # key → (fix, incident)
    _pool: ThreadPoolExecutor | None = None
    follow: bool = False  # follow each host's journal (fleet/watch/follow.py); the poll stays the fallback
    _woken: set[str] = field(default_factory=set)
    _wake: threading.Condition = field(default_factory=threading.Condition)
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)  # this watcher's start: written with `acting`
    _approval_waits: dict[str, str] = field(default_factory=dict)  # incident → why its approved fix waits
    alive: Callable[[], None] = field(default=lambda: None)  # the loop made progress (sdnotify.Heartbeat)
    # A fatal line's confirmation (host/watch/poll.py server_silent: why the server is taken for dead, else None)
    # and the end of a crashed server that lingers (host/watch/poll.py end_lingering); None: exits only.
    confirm: Callable[[Transport, HostEntry, str], str | None] | None = None
    end_lingering: Callable[[Transport, str, str], str] | None = None

    def __post_init__(self) -> None:
        hosts = (WatchedHost(e, str(e.settings.get("unit") or "")) for e in self.hosts)  # "": found at its first look
        self._hosts.update((h.key, h) for h in hosts)

    def host_states(self) -> dict[str, str]:
        return {name: h.state for name, h in self._hosts.items()}

    def close(self, *, wait_s: float = 0.0) -> None:
        """Wait up to ``wait_s`` for the fixes running in parallel and record them (SIGTERM: an in-flight
        transaction finishes, none starts), then close every connection."""
        self._reap(time.time(), wait=wait_s, every=True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        for h in self._hosts.values():  # every follower told first: they end together, not one after another
            if h.follower is not None:
                h.follower.ask_stop()
        for h in self._hosts.values():
            if h.transport is not None:
                h.transport.close()
            self._unfollow(h)
            h.transport = None

    def woken(self, host: str) -> None:
        """A host's follower saw systemd say something of its unit: poll it now (any thread)."""
        with self._wake:
            self._woken.add(host)
            self._wake.notify_all()

    def wait(self, timeout: float, settle: float = 0.25) -> bool:
        """Sleep until ``timeout`` or a follower's wake-up (then ``settle`` more, so systemd's lines of one
        crash — exited, failed, restart scheduled — are read by one poll); True when woken."""

        def due() -> bool:  # a woken host being fixed or backing off waits for its turn: no spinning rounds
            return any(
                not fixing(self, n.split(" ")[0]) and self._hosts[n].retry_at <= time.time() for n in self._woken
            )

        with self._wake:
            if not self._wake.wait_for(due, timeout):
                return False
        time.sleep(settle)
        return True

    def _unfollow(self, h: WatchedHost) -> None:
        if h.follower is not None:
            h.follower.stop()
            h.follower = None
            if h.transport is not None:  # a follower stopped while it reconnected: its connection goes too
                h.transport.close()

    def event(self, kind: str, now: float, **data: Any) -> None:
        # ``at``: when the event was written (the audit's clock); ``round_at``: the round's time, which the
        # rails decided with (every event of a round shares it, so it can precede the crash it reports).
        record = {"event": kind, "at": time.time(), "round_at": now, **data}
        append_event(self.state.directory, record)
        if self.metrics is not None:
            self.metrics.observe_event(record)
        if self.notify is not None and kind in ("decided", "outcome", "breaker"):
            self.notify(record)
        if self.on_event is not None:
            self.on_event(record)

    def round(self, now: float) -> None:
        """A dead watcher's fix resolved (read back, re-checked, never redone), the fixes that ended recorded;
        one poll of every host, the hosts whose journal spoke first (decided before the rest is polled: dead
        hosts' reconnects never delay a crash); pending approvals answered since are acted on."""
        discover(self, now)  # first: a dead watcher's fix is recovered on the unit found (keyed by host and unit)
        self._recover(now)
        self._reap(now)
        woken = self._woken.copy()  # one C call: atomic under the GIL
        for spoke in (True, False):
            group = [h for n, h in self._hosts.items() if (n in woken) is spoke]
            crashed = [(h, r) for h in group if (r := self._poll(h, now))]
            if crashed:
                self._count([h for h, _ in crashed], now)
            for h, reason in crashed:
                self._crashed(h, now, reason)
        self._waiting(now)
        self._answered(now)
        if self.metrics is not None:
            self.metrics.observe_round(self.host_states(), self.state.breaker_reason() is not None)

    def drain(self, clock: Callable[[], float], wait_s: float) -> None:
        """``--once``: the fixes the round started waited for (``wait_s`` each) and recorded, and the incidents
        that waited for their slot decided again and fixed in turn, so that one run leaves no decided fix
        undone; at most one pass per watched host."""
        with kept_alive(self.alive):
            for _ in range(len(self._hosts) + 1):
                if not self._running:
                    return
                self._reap(clock(), wait=wait_s, every=True)
                self._waiting(clock())

    def _count(self, crashed: list[WatchedHost], now: float) -> None:
        """Every crash of the round counted before any is decided, once (watch.db keys it by host, unit and
        crashed invocation), at its own time; the breaker trips once the crashes' times cross its threshold."""
        with self.state.transaction():
            for h in crashed:
                new = self.state.note_crashes(h.entry.name, h.unit, h.crashes, now, self.policy.breaker_keep_s)
                h.counted = [c.audit(is_new) for c, is_new in zip(h.crashes, new, strict=True)]
            view = self.fleet_view(now)
            crossed = None if self.state.breaker_reason() else breaker_crossing(view, self.policy)
            if crossed is not None:
                self.state.trip_breaker(crossed[1])
        if crossed is not None:
            # The crashes inside the window that crossed the line, as the rails knew them then: hosts polled
            # later in the same round (the ones whose journal did not speak) may hold an earlier crash.
            since = crossed[0] - self.policy.breaker_window_s
            window = [{"host": host, "at": at} for host, at in view.crashes if since <= at <= crossed[0]]
            self.event("breaker", now, reason=f"breaker tripped: {crossed[1]}", crossed_at=crossed[0], window=window)

    def fleet_view(self, now: float) -> FleetView:
        """The fleet as the rails see it at ``now``: the breaker's crashes read back from watch.db."""
        return FleetView(
            len(self._hosts),
            self.state.recent_crashes(now - self.policy.breaker_keep_s),
            len(self._running),
            self.state.breaker_reason(),
            self.state.is_paused(),
        )

    # -- one host ------------------------------------------------------------------------------------
    def _poll(self, h: WatchedHost, now: float) -> str | None:
        """The host's poll; the reason of a new crash, else None (fleet/watch/poll.py)."""
        return poll(self, h, now)

    def _crashed(self, h: WatchedHost, now: float, reason: str) -> None:
        name = h.entry.name
        h.state = "crashed"
        self.event("detected", now, host=name, unit=h.unit, reason=reason, crashes=h.counted)
        assert h.transport is not None
        try:
            report = self.diagnose(h.transport, h.entry)
        except RemediateError as exc:
            report = HostResult(host=name, outcome="failed", error=str(exc))
        findings = list(report.findings or ())
        kinds = tuple(str(f.get("kind")) for f in findings)
        # the pool of the newest run that logged one: the server's tokens before the crash (host/diagnose)
        tokens = report.max_total_num_tokens if report.diagnosis is not None else None
        self.event("diagnosed", now, host=name, unit=h.unit, findings=findings, kinds=kinds, tokens=tokens)
        with self.state.transaction():
            if h.crash_cursor:
                self.state.save_cursor(name, h.unit, h.crash_cursor)
                h.crash_cursor = None
            incident, is_new = fold(
                self.state.open_incident(name, h.unit), Crash(name, h.unit, now, kinds=kinds), self.policy, _new_id()
            )
            history = note_crash(self.state.history(name), now, self.policy)
            self.state.save_history(name, history)
            # One crash loop is one incident, decided once — unless it was only reported or waiting: a crash
            # folded into it is decided again (its findings merged, the policy and the rails as they are now:
            # a cooldown that ended, a watcher restarted with a policy that fixes this kind).
            before = None if is_new else self.state.outcome(incident.id)
            if before is not None and before not in REDECIDED:
                self.state.save_incident(incident)
                decision = None
            else:
                decision = self._decide(h, incident, now, before)
        if decision is None:
            self.event("folded", now, host=name, unit=h.unit, incident=incident.id, crashes=incident.crashes)
            return
        self._decided(h, incident.id, decision, now, redecided=before)

    def _decide(self, h: WatchedHost, incident: Incident, now: float, before: str | None) -> Decision | None:
        """Inside the caller's transaction: the rails' decision for the incident, and its state saved. A
        re-decision (``before``: the outcome it had) that changes nothing is None (the crash just folds)."""
        name = h.entry.name
        history = history_at(self, name, now)
        fleet = self.fleet_view(now)
        decision = decide(incident.kinds, history, fleet, self.policy, now)
        if before is not None and decision.verdict in ("report", "wait"):
            self.state.save_incident(incident)
            return None
        if decision.verdict == "breaker_open" and fleet.breaker_reason is None:
            self.state.trip_breaker(decision.reason.removeprefix("breaker tripped: "))
        if decision.verdict == "needs_human":
            self.state.save_history(name, replace(history, is_needs_human=True))
            h.state = "needs_human"
        if decision.verdict == "wait_approval":
            self.state.request_approval(incident.id, incident.id, name, now, self.policy.approval_ttl_s)
        self.state.save_incident(incident, "remediating" if decision.verdict == "act" else decision.verdict)
        return decision

    def _decided(self, h: WatchedHost, incident_id: str, decision: Decision, now: float, redecided: str | None) -> None:
        self.event(
            "decided",
            now,
            host=h.entry.name,
            unit=h.unit,
            incident=incident_id,
            verdict=decision.verdict,
            reason=decision.reason,
            dry_run=self.dry_run,
            **({} if redecided is None else {"redecided_from": redecided}),
        )
        if decision.reason.startswith("breaker tripped: "):
            self.event("breaker", now, reason=decision.reason)
        if decision.verdict == "act":
            self._act(h, incident_id, now, approved_by=None)

    def _waiting(self, now: float) -> None:
        """Incidents that waited for a free slot (the fleet-wide concurrency) decided again, oldest first."""
        rows = [r for r in self.state.incidents(limit=50) if r["outcome"] == "wait" and not r["closed"]]
        for row in reversed(rows):
            h = self._hosts.get(host_key(str(row["host"]), str(row["unit"])))
            if h is None or fixing(self, h.entry.name) or len(self._running) >= self.policy.concurrency:
                continue
            with self.state.transaction():
                incident = self.state.open_incident(h.entry.name, h.unit)
                if incident is None or incident.id != row["id"]:
                    continue
                decision = self._decide(h, incident, now, "wait")
            if decision is not None:
                self._decided(h, incident.id, decision, now, redecided="wait")

    def _act(self, h: WatchedHost, incident_id: str, now: float, approved_by: str | None) -> None:
        act(self, h, incident_id, now, approved_by)  # fleet/watch/fixes.py

    def _reap(self, now: float, *, wait: float = 0.0, every: bool = False) -> None:
        reap(self, now, wait=wait, every=every)

    def _run_fix(self, h: WatchedHost) -> HostResult:
        return run_fix(self, h)

    def _finish(
        self, h: WatchedHost, incident_id: str, now: float, result: HostResult, recheck: str | None = None
    ) -> None:
        finish(self, h, incident_id, now, result, recheck)

    def _recover(self, now: float) -> None:
        """Resolve the incidents a dead watcher left ``remediating`` (fleet/watch/recover.py)."""
        with kept_alive(self.alive):  # its re-run of a fix holds the loop (rare, at start), bounded by its timeouts
            recover(self, now)

    def _close(self, incident_id: str, host: str, unit: str, outcome: str) -> None:
        with self.state.transaction():
            incident = self.state.open_incident(host, unit)
            if incident is not None and incident.id == incident_id:
                self.state.save_incident(replace(incident, is_closed=True), outcome)
            self.state.set_acting(incident_id, None)

    def _answered(self, now: float) -> None:
        answered(self, now)  # fleet/watch/rails.py


def _new_id() -> str:
    return uuid.uuid4().hex[:8]
