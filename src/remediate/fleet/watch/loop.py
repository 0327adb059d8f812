"""The watcher's round: poll each host (one persistent connection each), fold a crash into an incident,
diagnose it, decide under the rails (core/watch/decide.py) and act through the ``fix`` the api hands in
(the normal `oom` transaction for that one host). The state is in controller/watch_state.py, every event
in the audit log."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from remediate.controller.transactions import read_transactions
from remediate.controller.watch_audit import append_event
from remediate.controller.watch_state import WatchState
from remediate.core.watch.decide import FleetView, decide
from remediate.core.watch.detect import Observation, crash_reason
from remediate.core.watch.incident import (
    Crash,
    backup_to_restore,
    fold,
    note_crash,
    note_fix,
    note_healthy,
    recovered_outcome,
    recovery,
)
from remediate.core.watch.policy import Policy
from remediate.errors import RemediateError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.metrics import WatchMetrics
from remediate.host.watch import poll_unit
from remediate.models import HostResult
from remediate.transport.base import Transport

DEFAULT_UNIT = "sglang.service"
MAX_BACKOFF_S = 300.0
CUT_PID = 0  # the `acting` pid of a fix whose connection was cut before its commit: the recovery re-runs it

Diagnose = Callable[[Transport, HostEntry], HostResult]
Fix = Callable[[HostEntry], HostResult]
Undo = Callable[[HostEntry, str], HostResult]  # restore this backup on the host (`rollback --to`)


@dataclass
class _Host:
    entry: HostEntry
    unit: str
    transport: Transport | None = None
    previous: Observation | None = None
    state: str = "unknown"
    retry_at: float = 0.0
    failures: int = 0
    crash_cursor: str | None = None  # the journal past a crash: saved with its decision, not before


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
    crashes: list[tuple[str, float]] = field(default_factory=list)
    _hosts: dict[str, _Host] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for entry in self.hosts:
            self._hosts[entry.name] = _Host(entry, str(entry.settings.get("unit") or DEFAULT_UNIT))

    def host_states(self) -> dict[str, str]:
        return {name: h.state for name, h in self._hosts.items()}

    def close(self) -> None:
        for h in self._hosts.values():
            if h.transport is not None:
                h.transport.close()
                h.transport = None

    def event(self, kind: str, now: float, **data: Any) -> None:
        # ``at``: when the event was written (the audit's clock); ``round_at``: the round's time, which the
        # rails decided with (every event of a round shares it, so it can precede the crash it reports).
        record = {"event": kind, "at": time.time(), "round_at": now, **data}
        append_event(self.state.directory, record)
        if self.metrics is not None:
            self.metrics.observe_event(record)
        if self.notify is not None and kind in ("decided", "outcome", "breaker"):
            self.notify(record)

    def round(self, now: float) -> None:
        """One poll of every host, then the decisions; pending approvals answered since are acted on.
        First, a fix a dead watcher left ``remediating`` is resolved (read back, re-checked, never redone)."""
        self._recover(now)
        crashed = [(h, reason) for h in self._hosts.values() if (reason := self._poll(h, now))]
        # Every crash of the round is counted before any is decided: the breaker sees them all at once.
        self.crashes.extend((h.entry.name, now) for h, _ in crashed)
        for h, reason in crashed:
            self._crashed(h, now, reason)
        self._answered(now)
        if self.metrics is not None:
            self.metrics.observe_round(self.host_states(), self.state.breaker_reason() is not None)

    # -- one host ------------------------------------------------------------------------------------
    def _poll(self, h: _Host, now: float) -> str | None:
        """The host's poll; the reason of a new crash, else None."""
        if now < h.retry_at:
            return None
        if h.transport is None:
            h.transport = self.connect(h.entry)
        cursor = self.state.cursor(h.entry.name, h.unit)
        started = time.monotonic()
        poll = poll_unit(h.transport, h.unit, cursor, None if cursor else now - self.policy.lookback_s)
        if self.metrics is not None:
            self.metrics.poll.observe(time.monotonic() - started)
        if poll is None:  # unreachable: never a crash; reconnect later, backing off (capped)
            h.transport.close()
            h.transport = None
            h.failures += 1
            h.retry_at = now + min(MAX_BACKOFF_S, 2.0**h.failures)
            if h.state != "unreachable":
                self.event("unreachable", now, host=h.entry.name, unit=h.unit, retry_in=h.retry_at - now)
            h.state = "unreachable"
            return None
        h.failures = 0
        reason = crash_reason(h.previous, poll)
        h.previous = poll.observation
        # A watcher killed between a crash's detection and its decision must find the crash again: the
        # journal's cursor past it is saved in the decision's transaction (_crashed), not here.
        h.crash_cursor = poll.cursor if reason else None
        with self.state.transaction():
            if poll.cursor and not reason:
                self.state.save_cursor(h.entry.name, h.unit, poll.cursor)
            history = self.state.history(h.entry.name)
            if reason is None:
                if poll.observation is not None and poll.observation.active == "active":
                    self.state.save_history(h.entry.name, note_healthy(history, now))
                    if h.state in ("unknown", "unreachable", "crashed"):
                        h.state = "healthy"
        return reason

    def _crashed(self, h: _Host, now: float, reason: str) -> None:
        name = h.entry.name
        h.state = "crashed"
        self.event("detected", now, host=name, unit=h.unit, reason=reason)
        assert h.transport is not None
        try:
            report = self.diagnose(h.transport, h.entry)
        except RemediateError as exc:
            report = HostResult(host=name, outcome="failed", error=str(exc))
        kinds = tuple(str(f.get("kind")) for f in report.extra.get("findings", []))
        self.event("diagnosed", now, host=name, unit=h.unit, findings=report.extra.get("findings", []), kinds=kinds)
        with self.state.transaction():
            if h.crash_cursor:
                self.state.save_cursor(name, h.unit, h.crash_cursor)
                h.crash_cursor = None
            incident, is_new = fold(
                self.state.open_incident(name, h.unit), Crash(name, h.unit, now, kinds=kinds), self.policy, _new_id()
            )
            history = note_crash(self.state.history(name), now, self.policy)
            self.state.save_history(name, history)
            if not is_new:  # one crash loop is one incident: folded, decided once
                self.state.save_incident(incident)
                folded = True
            else:
                folded = False
                breaker = self.state.breaker_reason()
                fleet = FleetView(len(self._hosts), tuple(self.crashes), 0, breaker, self.state.is_paused())
                decision = decide(kinds, history, fleet, self.policy, now)
                if decision.verdict == "breaker_open" and breaker is None:
                    self.state.trip_breaker(decision.reason.removeprefix("breaker tripped: "))
                if decision.verdict == "needs_human":
                    self.state.save_history(name, replace(history, is_needs_human=True))
                    h.state = "needs_human"
                if decision.verdict == "wait_approval":
                    self.state.request_approval(incident.id, incident.id, name, now)
                self.state.save_incident(incident, "remediating" if decision.verdict == "act" else decision.verdict)
        if folded:
            self.event("folded", now, host=name, unit=h.unit, incident=incident.id, crashes=incident.crashes)
            return
        self.event(
            "decided",
            now,
            host=name,
            unit=h.unit,
            incident=incident.id,
            verdict=decision.verdict,
            reason=decision.reason,
            dry_run=self.dry_run,
        )
        if decision.verdict == "breaker_open" and breaker is None:
            self.event("breaker", now, reason=decision.reason)
        if decision.verdict == "act":
            self._act(h, incident.id, now, approved_by=None)

    def _act(self, h: _Host, incident_id: str, now: float, approved_by: str | None) -> None:
        name = h.entry.name
        if self.dry_run:
            self.event("outcome", now, host=name, incident=incident_id, outcome="dry_run")
            self._close(incident_id, name, h.unit, "dry_run")
            return
        h.state = "remediating"
        with self.state.transaction():
            self.state.save_history(name, note_fix(self.state.history(name), now))  # a rolled-back fix counts too
            self.state.set_acting(incident_id, os.getpid())  # a watcher restarted after this one died reads it
            self.state.save_incident_outcome(incident_id, "remediating")
        self.event("acted", now, host=name, unit=h.unit, incident=incident_id, approved_by=approved_by, pid=os.getpid())
        self._finish(h, incident_id, now, self._run_fix(h))

    def _run_fix(self, h: _Host) -> HostResult:
        try:
            return self.fix(h.entry)
        except RemediateError as exc:
            return HostResult(host=h.entry.name, outcome="failed", error=str(exc))

    def _run_undo(self, h: _Host, backup: str) -> HostResult:
        """The killed fix's undo, as its transaction would have made it: its own backup restored, verified."""
        assert self.undo is not None
        try:
            result = self.undo(h.entry, backup)
        except RemediateError as exc:
            return HostResult(host=h.entry.name, outcome="failed", error=str(exc))
        return replace(result, outcome="rolled_back") if result.outcome == "restored" else result

    def _finish(self, h: _Host, incident_id: str, now: float, result: HostResult, recheck: str | None = None) -> None:
        """The incident's outcome event and close; ``recheck``: what a recovery's re-run found."""
        if recheck is None and result.outcome == "unreachable":
            # The connection was cut before the commit was sent (found by the chaos run): nothing changed on
            # the host and the fix is not over. It stays `remediating`, acted on by no process (pid 0), so the
            # next round's recovery runs the same fix again, counted once (when it started).
            with self.state.transaction():
                self.state.set_acting(incident_id, CUT_PID)
            h.previous = None
            return
        outcome = result.outcome if recheck is None else recovered_outcome(result.outcome)
        self.event(
            "outcome",
            now,
            host=h.entry.name,
            unit=h.unit,
            incident=incident_id,
            outcome=outcome,
            flags=getattr(result, "flags", None),
            tokens=getattr(result, "max_total_num_tokens", None),
            error=result.error,
            **({} if recheck is None else {"recheck": recheck}),
        )
        self._close(incident_id, h.entry.name, h.unit, outcome)
        h.state = "cooling_down" if outcome == "remediated" else "crashed"
        h.previous = None  # the fix restarted the unit: the next poll starts afresh

    def _recover(self, now: float) -> None:
        """Resolve the incidents a dead watcher left ``remediating`` (the state's flock says it is gone):
        the attempt's end as the transaction log has it, else the same one-host `oom` run again. The
        original fix was counted against the cap when it started: this counts nothing more. A ``--dry-run``
        watcher never acts: it leaves them for a real one."""
        if self.dry_run:
            return
        for row in self.state.incidents(limit=50):
            if row["outcome"] != "remediating" or row["closed"]:
                continue
            h = self._hosts.get(str(row["host"]))
            if h is None:  # not among this watcher's targets: left for the watcher that has it
                continue
            incident_id = str(row["id"])
            acting = self.state.acting(incident_id)
            since = float(row["last_at"])  # type: ignore[arg-type]
            records = read_transactions(h.entry.name, since)
            logged = tuple(str(r.get("event")) for r in records)
            step = recovery(acting, os.getpid(), logged)
            if step == "none":
                continue
            self.event("recovered", now, host=h.entry.name, unit=h.unit, incident=incident_id, pid=acting,
                       logged=list(logged), step=step)  # fmt: skip
            if step == "recheck":
                h.state = "remediating"
                if acting is None:  # died between decided and acted: its fix was never counted; this one is
                    with self.state.transaction():
                        self.state.save_history(h.entry.name, note_fix(self.state.history(h.entry.name), now))
                result = self._run_fix(h)
                recheck = result.outcome
                made = tuple((str(r.get("event")), tuple(map(str, r.get("backups") or ()))) for r in records)
                backup = backup_to_restore(result.outcome, made)
                if backup is not None and self.undo is not None:
                    self.event("undo", now, host=h.entry.name, unit=h.unit, incident=incident_id, backup=backup,
                               recheck=result.outcome, error=result.error)  # fmt: skip
                    result = self._run_undo(h, backup)
            else:
                result = HostResult(host=h.entry.name, outcome=step, error="as the transaction log recorded it")
                recheck = "none"
            self._finish(h, incident_id, now, result, recheck)

    def _close(self, incident_id: str, host: str, unit: str, outcome: str) -> None:
        with self.state.transaction():
            incident = self.state.open_incident(host, unit)
            if incident is not None and incident.id == incident_id:
                self.state.save_incident(replace(incident, is_closed=True), outcome)
            self.state.set_acting(incident_id, None)

    def _answered(self, now: float) -> None:
        for row in self.state.incidents(limit=50):
            if row["outcome"] != "wait_approval" or row["closed"]:
                continue
            answer = self.state.approval(str(row["id"]))
            if answer is None or answer[0] == "pending":
                continue
            h = self._hosts.get(str(row["host"]))
            if h is None:
                continue
            if answer[0] == "denied":
                self.event("outcome", now, host=h.entry.name, incident=row["id"], outcome="denied", by=answer[1])
                self._close(str(row["id"]), h.entry.name, h.unit, "denied")
            else:
                if h.transport is None:
                    h.transport = self.connect(h.entry)
                self._act(h, str(row["id"]), now, approved_by=answer[1])


def _new_id() -> str:
    return uuid.uuid4().hex[:8]
