"""The rails at act time. Approvals answered while the watcher runs: a denial closes the incident; an
approved fix is decided again with the rails as they are when it would act (``decide(approved=True)``: the
breaker, the pause, the cap, the cooldown, the concurrency) and acted on only when they allow — meanwhile it
waits, the audit saying why once per reason; an approval (asked for, or given and waiting) older than the
policy's ``approval_ttl`` expires. And the host's history as the rails weigh it: a time stored from the
future clamped to now."""

from __future__ import annotations

from typing import TYPE_CHECKING

from remediate.core.watch.decide import Decision, decide
from remediate.core.watch.incident import HostHistory, clamp_future
from remediate.fleet.watch.units import fixing, host_key

if TYPE_CHECKING:
    from remediate.fleet.watch.host import WatchedHost as _Host
    from remediate.fleet.watch.host import WatcherView as Watcher


def answered(w: Watcher, now: float) -> None:
    """Every incident waiting for approval, as its answer and the rails have it at ``now``."""
    for row in w.state.incidents(limit=50):
        if row["outcome"] != "wait_approval" or row["closed"]:
            continue
        incident_id = str(row["id"])
        answer = w.state.approval(incident_id)
        h = w._hosts.get(host_key(str(row["host"]), str(row["unit"])))
        if answer is None or h is None:
            continue
        name = h.entry.name
        expires_at = w.state.approval_expires_at(incident_id)
        if answer[0] in ("pending", "approved") and expires_at is not None and now > expires_at:
            with w.state.transaction():
                w.state.expire_approval(incident_id)
            w.event("outcome", now, host=name, unit=h.unit, incident=incident_id, outcome="expired",
                    approval=answer[0], by=answer[1], expired_at=expires_at, ttl=w.policy.approval_ttl_s)  # fmt: skip
            w._close(incident_id, name, h.unit, "expired")
            w._approval_waits.pop(incident_id, None)
            continue
        if answer[0] == "pending":
            continue
        if answer[0] == "denied":
            w.event("outcome", now, host=name, unit=h.unit, incident=incident_id, outcome="denied", by=answer[1])
            w._close(incident_id, name, h.unit, "denied")
            continue
        decision = _approved(w, h, incident_id, now)
        if decision is None:
            continue
        if decision.verdict != "act":
            why = f"{decision.verdict}: {decision.reason.split(' (')[0]}"  # not the seconds left: once per reason
            if w._approval_waits.get(incident_id) != why:
                w._approval_waits[incident_id] = why
                w.event("approval_waiting", now, host=name, unit=h.unit, incident=incident_id,
                        verdict=decision.verdict, reason=decision.reason, by=answer[1])  # fmt: skip
            continue
        w._approval_waits.pop(incident_id, None)
        if h.transport is None:
            h.transport = w.connect(h.entry)
        w._act(h, incident_id, now, approved_by=answer[1])


def _approved(w: Watcher, h: _Host, incident_id: str, now: float) -> Decision | None:
    """The rails' word on an approved fix at ``now`` (None: the incident is gone, or its host is being fixed:
    never two fixes on one host)."""
    if fixing(w, h.entry.name):
        return None
    with w.state.transaction():
        incident = w.state.open_incident(h.entry.name, h.unit)
        if incident is None or incident.id != incident_id:
            return None
        history = history_at(w, h.entry.name, now)
        return decide(incident.kinds, history, w.fleet_view(now), w.policy, now, approved=True)


def history_at(w: Watcher, host: str, now: float) -> HostHistory:
    """Inside the caller's transaction: the host's history as the rails weigh it at ``now``. A time stored
    from the future (a run whose clock was ahead) is clamped to ``now``, saved so, and said in the audit: else
    a fix stamped ahead would escape the cooldown and the cap until the clock caught up."""
    history, future = clamp_future(w.state.history(host), now)
    if future:
        w.state.save_history(host, history)
        w.event("clock", now, host=host, clamped=list(future),
                reason=f"{len(future)} fix time(s) ahead of this watcher's clock taken as now")  # fmt: skip
    return history
