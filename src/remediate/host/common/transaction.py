"""The verified transaction of one host: commit, wait healthy, verify — and undo when it does not hold.

Both ``oom`` (runner.py) and ``rollback`` (restore.py) go through :func:`transact`; the caller holds the
unit's lock (lock.py) from before its read until this returns.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from remediate.controller.transactions import record_transaction
from remediate.core.engines import SGLANG, Engine
from remediate.core.probe import ServiceState
from remediate.core.unitfile.report import mask_data
from remediate.errors import (
    CommitError,
    ConfigError,
    ConflictError,
    ConnectionLost,
    RemediateError,
    RemediationError,
    StateUnknownError,
    TransportError,
    UnhealthyError,
)
from remediate.host.common.commit import RESUME_WITHIN_S, CommitReport, FileWrite, commit, file_states
from remediate.host.common.health import Healthy, wait_healthy
from remediate.host.common.options import RunOptions
from remediate.host.common.outcome import Timer
from remediate.models import HostResult
from remediate.transport.base import Transport


@dataclass(frozen=True)
class Change:
    """One verified transaction's input, as its callers (``oom``, ``rollback``) build it: which files get
    which bytes, the server that must come back, and how it is judged."""

    unit: str
    writes: tuple[FileWrite, ...]  # each with its old bytes (compared before, put back by the undo) and new ones
    endpoint: tuple[str, int]  # the server's --host/--port as seen from the host (read.endpoint_of)
    options: RunOptions  # the wait's timeout, --no-rollback
    epoch: int  # the backups' timestamp, as the planned steps showed it
    verify: Callable[[Healthy], object]  # raises RemediationError when the healthy server is not what was written
    success: str  # the outcome when it holds: "remediated", "drift", "restored"
    undo_note: str  # appended to the error once the undo held
    analyze: bool = False  # systemd-analyze verify the new unit (when the host has it)
    engine: Engine = SGLANG  # what the health wait reads the capacity from
    fragment: str = ""  # the unit's fragment as the locked read found it (what systemd-analyze verifies)
    environ: bool = False  # the wait's last look reads the server's allocator variables (verify checks them)

    @property
    def verb(self) -> str:
        """The command, as the host's journal line names it."""
        return "rollback" if self.success == "restored" else "oom"


def transact(transport: Transport, change: Change, result: HostResult, timer: Timer) -> None:
    """Commit the change's writes, wait for the server, verify it; if it does not come back, put the previous
    bytes back the same way and wait for the old server (outcome ``rolled_back``), unless ``--no-rollback``."""
    result.outcome = "failed"
    unit, writes = change.unit, change.writes
    changes = "; ".join(result.summary) or ", ".join(w.path for w in writes)
    report: CommitReport | None = None
    # Written ahead of the commit: a controller killed while the host commits (the host goes on to the end)
    # still has a line naming the backups the commit makes, so the next run can put them back.
    planned = [f"{w.path}.bak.{w.backup_tag}.{change.epoch}" for w in writes]
    record_change(result, change, "committing", changes, backups=planned)
    try:
        with timer.phase("commit"):
            note = f"remediate {change.verb} {unit}: {changes}"
            report = commit(
                transport,
                unit,
                list(writes),
                epoch=change.epoch,
                analyze=change.analyze,
                fragment=change.fragment,
                journal=note,
            )
        result.backups = list(report.backups.values())
        result.backup = result.backups[0] if result.backups else None
        record_change(result, change, "committed", changes)
        result.warnings += [f"systemd-analyze: {line}" for line in report.analyze]
        with timer.phase("wait"):
            healthy = _wait(
                transport, change, report, timer, timer.waiting if timer.progress else None, environ=change.environ
            )
        with timer.phase("verify"):
            change.verify(healthy)
        result.outcome = change.success
        record_change(result, change, change.success, changes)
    except ConflictError:
        raise  # nothing was written
    except StateUnknownError as exc:
        record_change(result, change, "unknown", changes, error=str(exc))
        raise  # the host cannot be reached to undo anything; the message says what is known
    except CommitError as exc:
        result.backups = list(exc.backups)
        result.backup = result.backups[0] if result.backups else None
        if not exc.written:
            raise  # nothing was written: nothing to undo, no rollback phase
        _roll_back(transport, change, result, timer, exc, changes)
    except RemediationError as exc:
        if isinstance(exc, UnhealthyError):
            result.journal = exc.journal
        _roll_back(transport, change, result, timer, exc, changes)
    except TransportError as exc:
        # Once the commit was sent, a transport error (reading its report back, the files, the wait, the
        # probe) is never "unreachable": it ends in a record and the rollback path.
        failure = _after_transport_error(transport, change, result, changes, exc, committed=report is not None)
        _roll_back(transport, change, result, timer, failure, changes)


def _after_transport_error(
    transport: Transport,
    change: Change,
    result: HostResult,
    changes: str,
    exc: TransportError,
    *,
    committed: bool,
) -> RemediationError:
    """The error the rollback path starts from; StateUnknownError (recorded) when the host is gone, and a
    plain failure (recorded, no undo) when the commit's report never came and no file holds the new bytes."""
    detail = str(getattr(exc, "message", exc))
    writes = list(change.writes)
    try:
        if isinstance(exc, ConnectionLost):
            transport.reconnect(RESUME_WITHIN_S)
        held = [] if committed else [w.path for w in writes if file_states(transport, writes).get(w.path) == _new(w)]
    except RemediateError as again:
        unknown = StateUnknownError(
            result.host,
            f"the connection failed after the commit started ({detail}) and the host cannot be reached "
            f"({getattr(again, 'message', again)}): the state on the host is unknown. Re-running `remediate oom` "
            "is safe (it waits for the lock and reads what the host holds)",
        )
        record_change(result, change, "unknown", changes, error=str(unknown))
        raise unknown from exc
    if not committed and not held:
        failure = RemediationError(result.host, f"the commit failed ({detail}); no file holds the new bytes")
        record_change(result, change, "failed", changes, error=str(failure))
        raise failure from exc
    return RemediationError(result.host, f"the connection failed after the commit started: {detail}")


def _new(write: FileWrite) -> str:
    return hashlib.sha256(write.new_text.encode("utf-8", "surrogateescape")).hexdigest()


def _roll_back(
    transport: Transport, change: Change, result: HostResult, timer: Timer, exc: RemediationError, changes: str
) -> None:
    """Undo a commit that wrote something (unless ``--no-rollback``); outcome ``rolled_back``."""
    if not change.options.rollback or not change.writes:
        record_change(result, change, "failed", changes, error=str(exc))
        raise exc
    result.error = str(exc)
    # Written ahead of the undo, as ``committing`` is of the commit: a controller killed while the host puts the
    # old bytes back leaves a line saying the change's own rollback began (a watcher's recovery then reads the
    # old bytes on the host as that rollback, not as a person's).
    record_change(result, change, "rolling_back", changes, error=str(exc))
    try:
        with timer.phase("rollback"):
            _undo(transport, change, result, timer)
    except RemediateError as undo_exc:
        record_change(result, change, "failed", changes, error=str(undo_exc))
        raise
    result.outcome = "rolled_back"
    result.error = f"{exc}; {change.undo_note}"
    result.exit_code = 1
    record_change(result, change, "rolled_back", changes, error=result.error)


def record_change(
    result: HostResult,
    change: Change,
    event: str,
    changes: str,
    *,
    error: str | None = None,
    backups: list[str] | None = None,
) -> None:
    """The controller-side line of this transaction (state dir ``transactions.jsonl``), masked; a state dir
    that cannot be written is a warning, never a reason to leave a host half done. ``backups``: the ones named
    (the commit's planned ones, before it ran), else the result's."""
    record = {
        "time": datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": result.host,
        "unit": change.unit,
        "event": event,
        "changes": changes,
        "files": [w.path for w in change.writes],
        "backups": list(result.backups) if backups is None else backups,
        "error": error,
    }
    try:
        record_transaction(mask_data(record))
    except (ConfigError, OSError) as exc:
        warning = f"transaction record not written: {exc}"
        if warning not in result.warnings:
            result.warnings.append(warning)


def _wait(
    transport: Transport,
    change: Change,
    report: CommitReport,
    timer: Timer,
    on_progress: Callable[[str, float, str], None] | None = None,
    *,
    environ: bool = False,
) -> Healthy:
    return wait_healthy(
        transport,
        change.unit,
        change.endpoint,
        timeout=change.options.timeout,
        restart_epoch=report.restart_epoch,
        invocation_id=report.invocation_id,
        on_progress=on_progress,
        initial_state=ServiceState(unit=change.unit, properties=report.state) if report.state else None,
        engine=change.engine,
        environ=environ,
        sleep=timer.sleep,
    )


def _undo(transport: Transport, change: Change, result: HostResult, timer: Timer) -> None:
    """Restore the pre-change bytes the same atomic way, restart, and wait for the old server.

    Every file is in the undo: the script compares each one against the hash it should have now — the new
    bytes (renamed by the commit: restored) or still the old ones (a commit that failed part-way: left as
    is) — so an undo after a partial commit restores exactly what was renamed."""
    unit, writes = change.unit, change.writes
    undo = [
        FileWrite(w.path, w.new_text, w.old_text, backup_tag=None, old_absent=w.new_absent, new_absent=w.old_absent)
        for w in writes
    ]
    first = (result.error or "remediation failed").removeprefix(f"{result.host}: ").removeprefix(f"{transport.host}: ")
    paths = ", ".join(w.path for w in writes)
    try:
        note = f"remediate undo {unit}: the previous bytes of {paths} put back"
        report = commit(transport, unit, undo, epoch=int(time.time()), journal=note)
    except RemediateError as exc:
        result.outcome = "failed"
        detail = str(getattr(exc, "message", exc))
        raise RemediationError(result.host, f"{first}; the rollback failed too: {detail}") from exc
    try:
        result.max_total_num_tokens = _wait(transport, change, report, timer).tokens
    except RemediateError as exc:
        # The undo's commit held: the previous bytes are on disk and the unit was reset and restarted on them.
        # What is left is the old server itself not coming up (the same fault may hit both configurations).
        result.outcome = "failed"
        detail = str(getattr(exc, "message", exc))
        raise RemediationError(
            result.host,
            f"{first}; the rollback failed too: the previous bytes of {paths} are back and {unit} was restarted on "
            f"them, but the old server did not come up either: {detail}",
        ) from exc
