"""The unit's lock on the host, held for a whole run so that concurrent runs serialise.

``templates/probe.sh.j2`` (with ``lock_wait``) detects the unit when none was given, takes ``flock`` on
``/run/remediate/<unit>.service.lock``, reads everything needed to plan, and then keeps the lock in that
small process on its own SSH channel until the channel closes — and, if a commit script of the run is still
running on the host (the connection was cut), until that script is done: the detection, the lock and the
read are one round trip. ``templates/prune.sh.j2`` takes the same lock for its own short transaction. Both
exit :data:`LOCK_HELD_EXIT` when another run holds it, :data:`LOCK_BROKEN_EXIT` when the lock cannot be used.

The directory is root's own (created 0700, refused when anyone else could write it): a world-writable
``/run/lock`` would let any user pre-create and hold the lock and block root's runs. The name comes from
the unit's canonical name (systemd's ``Id``, resolved on the host before the lock is taken), so
``sglang``, ``sglang.service`` and an ``Alias=`` of it take one lock.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from remediate.core.probe import ProbeResult, parse_probe
from remediate.core.unitfile.unitname import normalise_unit
from remediate.errors import CommandError, LockHeldError, RemediationError, TransportError
from remediate.host.common.options import SMI_TIMEOUT_S, RunOptions
from remediate.host.common.outcome import Timer, host_outcome, new_result
from remediate.host.common.probe import probe_script, resolve_unit
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Retake, Transport

LOCK_DIR = "/run/remediate"
LOCK_HELD_EXIT = 75  # EX_TEMPFAIL: flock -w timed out (templates/_flock.sh.j2)
READ_TIMEOUT_S = 60  # the read itself, once the lock is taken
LOCK_BROKEN_EXIT = 73  # EX_CANTCREAT: the lock directory or file is unusable (templates/_flock.sh.j2)
LOCKED = "@@locked"  # what the locked read prints once it holds the unit's lock
COMMIT_TIMEOUT_S = 450  # a commit script's own limits: daemon-reload 90 s, reset-failed 30 s, restart 300 s, copies
HEARTBEAT_TIMEOUT_S = 30  # the lock holder gives up when its channel is silent this long (transport HEARTBEAT_S)


def lock_path(unit: str) -> str:
    return f"{LOCK_DIR}/{normalise_unit(unit)}.lock"


def commit_lock_path(unit: str) -> str:
    """Held by a running commit script; the lock holder waits for it before it releases the unit's lock."""
    return lock_path(unit) + ".commit"


def commit_log_path(unit: str, token: str) -> str:
    """Where a commit script writes its report on the host (read back after a reconnect)."""
    return f"{LOCK_DIR}/{normalise_unit(unit)}.commit.{token}.log"


@dataclass(frozen=True)
class Held:
    """What a mutating run starts from: the unit (detected when not given) and, unless it is a dry run,
    everything read under its lock (None: read it without the lock, :func:`remediate.host.common.probe.read_unit`)."""

    unit: str | None
    found: ProbeResult | None = None


def _why(exc: CommandError) -> str:
    """The lock script's own reason (``@@error lock… REASON``), else its last line of stderr, else its exit."""
    lines = [line for line in exc.result.stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("@@error "):
            return line.split(" ", 2)[-1]
    return lines[-1] if lines else f"exit {exc.result.exited}"


@contextmanager
def locked_read(
    transport: Transport, unit: str | None, wait: int, journal_lines: int = 0, smi_timeout: int = SMI_TIMEOUT_S
) -> Iterator[ProbeResult]:
    """Detect the unit (unless given), take its lock and read it, in one round trip; keep the lock until the
    block ends — read, plan, commit, wait, verify, undo — so concurrent runs serialise: the next one waits
    (≤ ``wait`` s) and then reads what this one left, or fails clearly. The lock lives in a process tied to
    this SSH channel: it cannot outlive this run (nor a half-open connection for long: a heartbeat). After a
    reconnect it is taken back for the unit found (no detection again), once a commit script of this run is
    done (waited for up to the commit's own limit), and only if ``@@locked`` says so. No unit, or several:
    ConfigError, no lock taken."""
    unit = normalise_unit(unit) if unit else None
    script = probe_script(
        unit, (), journal_lines=journal_lines, journal_since=None, smi_timeout=smi_timeout, **_lock_args(wait)
    )
    with ExitStack() as held:
        try:
            text = held.enter_context(
                transport.hold(
                    "bash -c " + shlex.quote(script),
                    ready="@@end",
                    timeout=wait + READ_TIMEOUT_S,
                    again=lambda first: retake(first, unit, wait),
                )
            )
        except CommandError as exc:
            if exc.result.exited == LOCK_HELD_EXIT:
                raise LockHeldError(transport.host) from None
            if exc.result.exited == LOCK_BROKEN_EXIT:
                raise RemediationError(transport.host, f"cannot take the unit's lock: {_why(exc)}") from exc
            raise TransportError(transport.host, f"probe failed (exit {exc.result.exited}): {_why(exc)}") from exc
        found = resolve_unit(transport, parse_probe(text, unit), unit)
        if LOCKED not in text.splitlines():
            raise TransportError(transport.host, "the locked read did not say @@locked: the unit's lock is not held")
        yield found


def _lock_args(wait: int, **more: object) -> dict[str, Any]:
    return {
        "lock_dir": LOCK_DIR,
        "lock_wait": int(wait),
        "commit_wait": COMMIT_TIMEOUT_S,
        "heartbeat_timeout": HEARTBEAT_TIMEOUT_S,
        **more,
    }


def retake(first: str, unit: str | None, wait: int) -> Retake:
    """How a reconnect takes the lock back: for the unit the first read found (its canonical Id, never detected
    again), waiting first for a commit script of this run (the commit lock, up to its own limit), then for
    the unit's lock (the old holder, on a half-open connection, lets go within its heartbeat timeout)."""
    found = parse_probe(first, unit)
    name = found.state.unit if found.state is not None else unit
    if not name:
        raise TransportError("", "no unit to take the lock back for")  # never: the first read found one
    lock_wait = int(wait) + HEARTBEAT_TIMEOUT_S + 5
    script = probe_script(name, (), journal_lines=0, journal_since=None, **_lock_args(lock_wait, retake=True))
    return Retake("bash -c " + shlex.quote(script), LOCKED, COMMIT_TIMEOUT_S + lock_wait + READ_TIMEOUT_S)


@contextmanager
def connected_and_locked(
    transport: Transport, options: RunOptions, timer: Timer, journal_lines: int = 0
) -> Iterator[Held]:
    """Connect, then — unless it is a dry run — detect, lock and read in one round trip, and keep the lock
    until the block ends: concurrent runs serialise, and the next one reads what this one left."""
    with timer.phase("connect"):
        transport.open()
    if options.dry_run:
        yield Held(options.unit)
        return
    with ExitStack() as held:
        with timer.phase("lock"):
            found = held.enter_context(
                locked_read(transport, options.unit, options.lock_wait, journal_lines, options.smi_timeout)
            )
        assert found.state is not None
        yield Held(found.state.unit, found)


def run_locked(
    transport: Transport,
    options: RunOptions,
    body: Callable[[Held, HostResult, Timer], None],
    *,
    label: str | None = None,
    progress: ProgressFn | None = None,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    journal_lines: int = 0,
) -> HostResult:
    """One mutating run on a host (``oom``, ``rollback``): ``body(held, result, timer)`` runs connected and
    under the unit's lock, its phases timed; a RemediateError becomes the returned result, never raised.
    ``journal_lines``: the locked read also brings the crash evidence (oom's pre-commit gate). ``now`` and
    ``sleep``: the run's clock (the result's timestamps; the pauses of its health waits)."""
    result = new_result(label or transport.host, now)
    timer = Timer(result, progress, sleep)
    with host_outcome(result, now), connected_and_locked(transport, options, timer, journal_lines) as held:
        body(held, result, timer)
    return result
