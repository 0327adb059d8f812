"""The unit's lock on the host, held for a whole run so that concurrent runs serialise.

``templates/lock.sh.j2`` takes ``flock`` on ``/run/lock/remediate-<unit>.lock`` in a small process on its
own SSH channel and keeps it until that channel closes; ``templates/prune.sh.j2`` takes the same lock
for its own short transaction. Both exit :data:`LOCK_HELD_EXIT` when another run holds it.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from remediate.errors import CommandError, LockHeldError, RemediationError
from remediate.host import templates
from remediate.host.options import RunOptions
from remediate.host.outcome import Timer, host_outcome, new_result
from remediate.host.read import detect_unit
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Transport

LOCK_DIR = "/run/lock"
LOCK_HELD_EXIT = 75  # EX_TEMPFAIL: flock -w timed out (templates/_flock.sh.j2)


def lock_path(unit: str) -> str:
    return f"{LOCK_DIR}/remediate-{unit}.lock"


@contextmanager
def unit_lock(transport: Transport, unit: str, wait: int) -> Iterator[None]:
    """Hold the unit's lock on the host for a whole run — read, plan, commit, wait, verify, undo — so
    concurrent runs serialise: the next one waits (≤ ``wait`` s) and then reads what this one left, or
    fails clearly. The lock lives in a process tied to this SSH channel: it cannot outlive this run."""
    script = templates.render("lock.sh.j2", lock_path=lock_path(unit), lock_wait=int(wait))
    try:
        with transport.hold("bash -c " + shlex.quote(script), ready="@@locked", timeout=wait + 15):
            yield
    except CommandError as exc:
        if exc.result.exited == LOCK_HELD_EXIT:
            raise LockHeldError(transport.host) from None
        raise RemediationError(transport.host, f"cannot take the lock {lock_path(unit)}: {exc}") from exc


@contextmanager
def connected_and_locked(transport: Transport, options: RunOptions, timer: Timer) -> Iterator[str | None]:
    """Connect, then — unless it is a dry run — take the unit's lock before anything is read, and keep it
    until the block ends: concurrent runs serialise, and the next one reads what this one left.
    Yields the unit name (detected when not given; None for a dry run without --unit)."""
    with timer.phase("connect"):
        transport.open()
    with ExitStack() as held:
        unit = options.unit
        if not options.dry_run:
            with timer.phase("lock"):
                unit = unit or detect_unit(transport)
                held.enter_context(unit_lock(transport, unit, options.lock_wait))
        yield unit


def run_locked(
    transport: Transport,
    options: RunOptions,
    body: Callable[[str | None, HostResult, Timer], None],
    *,
    label: str | None = None,
    progress: ProgressFn | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """One mutating run on a host (``oom``, ``rollback``): ``body(unit, result, timer)`` runs connected and
    under the unit's lock, its phases timed; a RemediateError becomes the returned result, never raised."""
    result = new_result(label or transport.host, now)
    timer = Timer(result, progress)
    with host_outcome(result, now), connected_and_locked(transport, options, timer) as unit:
        body(unit, result, timer)
    return result
