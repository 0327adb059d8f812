"""The unit's lock on the host, held for a whole run so that concurrent runs serialise.

``templates/lock.sh.j2`` takes ``flock`` on ``/run/remediate/<unit>.service.lock`` in a small process on
its own SSH channel and keeps it until that channel closes — and, if a commit script of the run is still
running on the host (the connection was cut), until that script is done. ``templates/prune.sh.j2`` takes
the same lock for its own short transaction. Both exit :data:`LOCK_HELD_EXIT` when another run holds it.

The directory is root's own (created 0700, refused when anyone else could write it): a world-writable
``/run/lock`` would let any user pre-create and hold the lock and block root's runs. The name comes from
the normalised unit name, so ``sglang`` and ``sglang.service`` take one lock.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from remediate.core.unitname import normalise_unit
from remediate.errors import CommandError, LockHeldError, RemediationError
from remediate.host import templates
from remediate.host.options import RunOptions
from remediate.host.outcome import Timer, host_outcome, new_result
from remediate.host.read import detect_unit
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Transport

LOCK_DIR = "/run/remediate"
LOCK_HELD_EXIT = 75  # EX_TEMPFAIL: flock -w timed out (templates/_flock.sh.j2)
LOCK_BROKEN_EXIT = 73  # EX_CANTCREAT: the lock directory or file is unusable (templates/_flock.sh.j2)


def lock_path(unit: str) -> str:
    return f"{LOCK_DIR}/{normalise_unit(unit)}.lock"


def commit_lock_path(unit: str) -> str:
    """Held by a running commit script; the lock holder waits for it before it releases the unit's lock."""
    return lock_path(unit) + ".commit"


def commit_log_path(unit: str, token: str) -> str:
    """Where a commit script writes its report on the host (read back after a reconnect)."""
    return f"{LOCK_DIR}/{normalise_unit(unit)}.commit.{token}.log"


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
        raise RemediationError(transport.host, f"cannot take the lock {lock_path(unit)}: {_why(exc)}") from exc


def _why(exc: CommandError) -> str:
    """The lock script's own reason (``@@error lock… REASON``), else its last line of stderr, else its exit."""
    lines = [line for line in exc.result.stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("@@error "):
            return line.split(" ", 2)[-1]
    return lines[-1] if lines else f"exit {exc.result.exited}"


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
