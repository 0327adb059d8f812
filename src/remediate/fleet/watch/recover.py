"""A restarted watcher resolves the incidents a dead one left ``remediating``: by the transaction log, else
by the same one-host `oom` run again (idempotent), never a second fix counted."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from remediate.controller.transactions import read_transactions
from remediate.core.watch.incident import (
    CUT,
    ROLLED_BACK_BY_PERSON,
    ROLLING_BACK,
    UNDO_PENDING,
    backup_to_restore,
    committed_backups,
    note_fix,
    recovery,
    undone_on_host,
)
from remediate.errors import RemediateError
from remediate.fleet.watch.fixes import host_lost
from remediate.fleet.watch.units import MAX_BACKOFF_S, host_key
from remediate.host.common.commit import path_states
from remediate.models import HostResult

if TYPE_CHECKING:
    from remediate.fleet.watch.host import WatchedHost as _Host
    from remediate.fleet.watch.host import WatcherView as Watcher


def recover(w: Watcher, now: float) -> None:
    """Resolve the incidents a dead watcher left ``remediating`` (the state's flock says it is gone: any
    ``acting`` instance but this watcher's own is a dead one's, whatever its PID was): the attempt's end as
    the transaction log has it, else the same one-host `oom` run again — never after a person's `rollback`
    of the unit since the fix started (closed ``rolled_back_by_person``, nothing run). The
    original fix was counted against the cap when it started: this counts nothing more. A ``--dry-run``
    watcher never acts: it leaves them for a real one."""
    if w.dry_run:
        return
    for row in w.state.incidents(limit=50):
        if row["outcome"] != "remediating" or row["closed"]:
            continue
        h = w._hosts.get(host_key(str(row["host"]), str(row["unit"])))
        if h is None or now < h.retry_at:  # not this watcher's target (left for the one that has it), or lost
            continue
        incident_id = str(row["id"])
        acting = w.state.acting(incident_id)
        since = float(row["last_at"])  # type: ignore[arg-type]
        records = [r for r in read_transactions(h.entry.name, since) if r.get("unit") in (None, h.unit)]
        logged = tuple(str(r.get("event")) for r in records)
        step = recovery(acting, w.instance, logged)
        if step == "none":
            continue
        made = tuple((str(r.get("event")), tuple(map(str, r.get("backups") or ()))) for r in records)
        files = tuple(str(f) for r in records for f in r.get("files") or ())
        if step == "recheck" and _undone_on_host(w, h, committed_backups(made, files)):
            # The old bytes are back: the fix's own rollback, begun (logged ahead) before its watcher died, else
            # a `rollback` from another controller (its bytes say so, not our log).
            step = "rolled_back" if ROLLING_BACK in logged else ROLLED_BACK_BY_PERSON
        w.event("recovered", now, host=h.entry.name, unit=h.unit, incident=incident_id, acting=acting,
               logged=list(logged), step=step)  # fmt: skip
        if step in ("recheck", UNDO_PENDING):
            h.state = "remediating"
            if step == "recheck":
                if acting is None:  # died between decided and acted: its fix was never counted; this one is
                    with w.state.transaction():
                        w.state.save_history(h.entry.name, note_fix(w.state.history(h.entry.name), now))
                result = w._run_fix(h)
                if host_lost(result):  # cut again: the next round's recovery re-checks, counted once
                    _retry_later(w, h, incident_id, CUT, now)
                    continue
                recheck = result.outcome
                backup = backup_to_restore(result.outcome, made)
            else:
                recheck, backup = "failed", backup_to_restore("failed", made)
                lost = "an undo of the fix lost the host" if backup else "no backup of the fix to put back"
                result = HostResult(host=h.entry.name, outcome="failed", error=lost)
            if backup is not None and w.undo is not None:
                w.event("undo", now, host=h.entry.name, unit=h.unit, incident=incident_id, backup=backup,
                       recheck=recheck, error=result.error)  # fmt: skip
                result = _run_undo(w, h, backup)
                if host_lost(result):  # the undo lost the host: never closed `failed` on the new bytes
                    _retry_later(w, h, incident_id, UNDO_PENDING, now)
                    continue
        elif step == ROLLED_BACK_BY_PERSON:
            result = HostResult(
                host=h.entry.name, outcome=step, error="a person rolled the unit back since: not redone"
            )  # the transaction log's `restored`, or the unit's bytes equal to the fix's backup again
            recheck = "none"
        elif step == "rolled_back" and logged[-1:] != ("rolled_back",):
            result = HostResult(
                host=h.entry.name, outcome=step, error="the fix's own rollback, begun before its watcher died"
            )  # the log's `rolling_back`, and the unit's bytes equal to the fix's backup again
            recheck = "none"
        else:
            result = HostResult(host=h.entry.name, outcome=step, error="as the transaction log recorded it")
            recheck = "none"
        w._finish(h, incident_id, now, result, recheck)


def _retry_later(w: Watcher, h: _Host, incident_id: str, mark: str, now: float) -> None:
    """The recovery lost the host: the incident stays ``remediating`` under ``mark`` (what the next recovery
    does), and the host is tried again after the poll's backoff, not every round."""
    with w.state.transaction():
        w.state.set_acting(incident_id, mark)
    h.failures += 1
    h.retry_at = now + min(MAX_BACKOFF_S, 2.0**h.failures)
    h.previous = None
    w.event("unreachable", now, host=h.entry.name, unit=h.unit, incident=incident_id, next=mark,
            retry_in=h.retry_at - now)  # fmt: skip


def _undone_on_host(w: Watcher, h: _Host, pairs: dict[str, str]) -> bool:
    """The killed fix's files read on the host (their sha256 and their backups'): back to the bytes before the
    fix, whoever restored them. Unreachable: not known (False), and the re-run finds out as it would."""
    if not pairs:
        return False
    try:
        if h.transport is None:
            h.transport = w.connect(h.entry)
        sums = path_states(h.transport, [*pairs, *pairs.values()])
    except RemediateError:
        return False
    return undone_on_host(pairs, sums)


def _run_undo(w: Watcher, h: _Host, backup: str) -> HostResult:
    """The killed fix's undo, as its transaction would have made it: its own backup restored, verified."""
    assert w.undo is not None
    try:
        result = w.undo(h.entry, backup)
    except RemediateError as exc:
        return HostResult(host=h.entry.name, outcome="failed", error=str(exc))
    # ``unchanged``: the unit already holds the backup's bytes (an earlier undo got that far before the host was
    # lost): undone all the same.
    return replace(result, outcome="rolled_back") if result.outcome in ("restored", "unchanged") else result
