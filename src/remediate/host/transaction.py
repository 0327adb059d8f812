"""The verified transaction of one host: commit, wait healthy, verify — and undo when it does not hold.

Both ``oom`` (runner.py) and ``rollback`` (restore.py) go through :func:`transact`; the caller holds the
unit's lock (lock.py) from before its read until this returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from remediate.errors import ConflictError, RemediateError, RemediationError, UnhealthyError
from remediate.host.commit import CommitReport, FileWrite, commit
from remediate.host.health import Healthy, wait_healthy
from remediate.host.options import RunOptions
from remediate.host.outcome import Timer
from remediate.models import HostResult
from remediate.transport.base import Transport


def transact(
    transport: Transport,
    unit: str,
    writes: list[FileWrite],
    endpoint: tuple[str, int],
    options: RunOptions,
    result: HostResult,
    timer: Timer,
    *,
    epoch: int,
    verify: Callable[[Healthy], object],
    success: str,
    undo_note: str,
    analyze: bool = False,
) -> None:
    """Commit ``writes``, wait for the server, verify it; if it does not come back, put the previous bytes
    back the same way and wait for the old server (outcome ``rolled_back``), unless ``--no-rollback``."""
    result.outcome = "failed"
    try:
        with timer.phase("commit"):
            report = commit(transport, unit, writes, epoch=epoch, analyze=analyze)
        result.backups = list(report.backups.values())
        result.backup = result.backups[0] if result.backups else None
        result.warnings += [f"systemd-analyze: {line}" for line in report.analyze]
        with timer.phase("wait"):
            healthy = _wait(transport, unit, endpoint, options, report, timer.waiting)
        with timer.phase("verify"):
            verify(healthy)
        result.outcome = success
    except ConflictError:
        raise  # nothing was written
    except RemediationError as exc:
        if isinstance(exc, UnhealthyError):
            result.journal = exc.journal
        if not options.rollback or not writes:
            raise
        result.error = str(exc)
        with timer.phase("rollback"):
            _undo(transport, unit, writes, endpoint, options, result)
        result.outcome = "rolled_back"
        result.error = f"{exc}; {undo_note}"
        result.exit_code = 1


def _wait(
    transport: Transport,
    unit: str,
    endpoint: tuple[str, int],
    options: RunOptions,
    report: CommitReport,
    on_progress: Callable[[str, float, str], None] | None = None,
) -> Healthy:
    return wait_healthy(
        transport,
        unit,
        endpoint,
        timeout=options.timeout,
        restart_epoch=report.restart_epoch,
        invocation_id=report.invocation_id,
        on_progress=on_progress,
    )


def _undo(
    transport: Transport,
    unit: str,
    writes: list[FileWrite],
    endpoint: tuple[str, int],
    options: RunOptions,
    result: HostResult,
) -> None:
    """Restore the pre-change bytes the same atomic way, restart, and wait for the old server."""
    undo = [FileWrite(w.path, w.new_text, w.old_text, backup_tag=None) for w in writes]
    try:
        report = commit(transport, unit, undo, epoch=int(time.time()))
        result.max_total_num_tokens = _wait(transport, unit, endpoint, options, report).tokens
    except RemediateError as exc:
        result.outcome = "failed"
        raise RemediationError(
            result.host, f"{result.error or 'remediation failed'}; the rollback failed too: {exc}"
        ) from exc
