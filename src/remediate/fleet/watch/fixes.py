"""The watcher's fixes: each on the pool's threads (even at ``concurrency: 1``: the loop polls, detects and
decides the other hosts while a fix waits for a long model load), recorded on the loop's thread once it ended
(every state write and event stays on the loop's). A fix whose connection was cut stays ``remediating`` for
the recovery (fleet/watch/recover.py)."""

from __future__ import annotations

import os
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

from remediate.controller.transactions import read_transactions
from remediate.controller.watch_audit import fix_change
from remediate.core.watch.incident import CUT, note_fix, recovered_outcome
from remediate.errors import EXIT_UNREACHABLE, RemediateError
from remediate.fleet.watch.host import WatchedHost, WatcherView
from remediate.models import HostResult


def act(w: WatcherView, h: WatchedHost, incident_id: str, now: float, approved_by: str | None) -> None:
    name = h.entry.name
    if w.dry_run:
        w.event("outcome", now, host=name, incident=incident_id, outcome="dry_run")
        w._close(incident_id, name, h.unit, "dry_run")
        return
    h.state = "remediating"
    with w.state.transaction():
        w.state.save_history(name, note_fix(w.state.history(name), now))  # a rolled-back fix counts too
        w.state.set_acting(incident_id, w.instance)  # a watcher restarted after this one died reads it
        w.state.save_incident_outcome(incident_id, "remediating")
    w.event("acted", now, host=name, unit=h.unit, incident=incident_id, approved_by=approved_by,
            pid=os.getpid(), instance=w.instance)  # fmt: skip
    # Every fix on the pool, even at `concurrency: 1` (_running enforces the limit): the loop keeps polling
    # the others and records each end in a later round (_reap). State and events stay on the loop's thread.
    if w._pool is None:
        w._pool = ThreadPoolExecutor(w.policy.concurrency, thread_name_prefix="watch-fix")
    w._running[h.key] = (w._pool.submit(run_fix, w, h), incident_id)


def reap(w: WatcherView, now: float, *, wait: float = 0.0, every: bool = False) -> None:
    """Record the parallel fixes that ended; ``wait``: seconds to wait for one (``every``: for all)."""
    if not w._running:
        return
    futures = {future: key for key, (future, _) in w._running.items()}
    done, _ = futures_wait(futures, timeout=wait, return_when=ALL_COMPLETED if every else FIRST_COMPLETED)
    for future in done:
        key = futures[future]
        _, incident_id = w._running.pop(key)
        finish(w, w._hosts[key], incident_id, now, future.result())


def run_fix(w: WatcherView, h: WatchedHost) -> HostResult:
    """The fix, on the pool's thread. A crash told by its fatal line whose server still lingers in its crash
    handler (sglang ≥ 0.5.23 at TP > 1: a minute of dumps, deaf to SIGTERM) is ended first (host/watch/poll.py
    ``end_lingering``: a stop job, then SIGKILL), so the fix's restart does not wait for it."""
    h.ended = None
    lingering, h.lingering = h.lingering, None
    if lingering and w.end_lingering is not None and h.transport is not None:
        try:
            h.ended = w.end_lingering(h.transport, h.unit, lingering)
        except RemediateError as exc:
            h.ended = f"lingers ({exc})"
    try:
        return w.fix(h.entry)
    except RemediateError as exc:
        return HostResult(host=h.entry.name, outcome="failed", error=str(exc))


def finish(
    w: WatcherView, h: WatchedHost, incident_id: str, now: float, result: HostResult, recheck: str | None = None
) -> None:
    """The incident's outcome event and close; ``recheck``: what a recovery's re-run found. A fix whose
    connection was cut before its commit, or after it for good (the host's state unknown), stays
    ``remediating`` (acting ``CUT``): the next round's recovery runs the same fix again, counted once."""
    if recheck is None and host_lost(result):
        with w.state.transaction():
            w.state.set_acting(incident_id, CUT)
        h.previous = None
        return
    outcome = result.outcome if recheck is None else recovered_outcome(result.outcome)
    w.event(
        "outcome",
        now,
        host=h.entry.name,
        unit=h.unit,
        incident=incident_id,
        outcome=outcome,
        **fix_change(result),
        error=result.error,
        **({"lingering": h.ended} if h.ended and recheck is None else {}),
        **({} if recheck is None else {"recheck": recheck}),
    )
    w._close(incident_id, h.entry.name, h.unit, outcome)
    h.state = "cooling_down" if outcome == "remediated" else "crashed"
    h.previous = None  # the fix restarted the unit: the next poll starts afresh


def host_lost(result: HostResult) -> bool:
    """Whether a fix (or a recovery's re-check or undo) ended because the host was lost: unreachable, a
    connection that died (exit 3), or lost after the commit for good (its state unknown). What the host holds
    is then resolved by the next recovery, never closed ``failed``."""
    return result.outcome == "unreachable" or result.exit_code == EXIT_UNREACHABLE or is_state_unknown(result)


def is_state_unknown(result: HostResult) -> bool:
    """Whether a fix ended ``failed`` because its connection was lost after the commit and could not be
    re-established (its transaction's last record: ``unknown``): what the host holds is not known, so it is
    resolved as a cut fix is, by the recovery's re-run (idempotent), not closed ``failed`` on new bytes."""
    if result.outcome != "failed":
        return False
    records = read_transactions(result.host, result.started_at)
    return bool(records) and records[-1].get("event") == "unknown"
