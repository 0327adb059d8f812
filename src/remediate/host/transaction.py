"""The remote transaction of one host: read it, commit a change to it, wait for it, undo it.

``probe`` reads everything in one round trip (``templates/probe.sh.j2``); ``commit`` runs
``templates/commit.sh.j2`` — lock, compare-and-swap, backup, atomic write, daemon-reload, reset-failed,
restart; ``transact`` is commit → wait → verify with the automatic undo that both ``oom`` and
``rollback`` use.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from remediate.core import probes
from remediate.core.probes import ProbeResult
from remediate.core.unitfile.edit import SourceFile, UnitSources
from remediate.errors import (
    CommandError,
    ConfigError,
    ConflictError,
    RemediateError,
    RemediationError,
    TransportError,
    UnhealthyError,
)
from remediate.host import templates
from remediate.host.health import Healthy, wait_healthy
from remediate.models import HostResult, Phase, RunOptions
from remediate.transport.base import Transport

ProgressFn = Callable[[str, str, str], None]  # (host, phase, detail)


LOCK_DIR = "/run/lock"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogateescape")).decode("ascii")


@dataclass
class FileWrite:
    """One file the commit script replaces atomically."""

    path: str
    old_text: str
    new_text: str
    backup_tag: str | None = "oom"

    def render_args(self) -> dict[str, str | None]:
        return {
            "path": self.path,
            "old_sha": _sha256(self.old_text),
            "new_sha": _sha256(self.new_text),
            "b64": _b64(self.new_text),
            "backup_tag": self.backup_tag,
        }


@dataclass
class CommitReport:
    backups: dict[str, str] = field(default_factory=dict)
    restart_epoch: float | None = None
    invocation_id: str | None = None
    analyze: list[str] = field(default_factory=list)


def lock_path(unit: str) -> str:
    return f"{LOCK_DIR}/remediate-{unit}.lock"


def probe(
    transport: Transport, unit: str | None, extra_files: tuple[str, ...] = (), *, detect_only: bool = False
) -> ProbeResult:
    """Read everything needed to plan, in one round trip (``detect_only``: just find the sglang unit)."""
    script = templates.render(
        "probe.sh.j2",
        unit=unit or "",
        properties=probes.SHOW_PROPERTIES,
        extra_files=extra_files,
        detect_only=detect_only,
    )
    result = transport.run("bash -s", stdin=script, timeout=60)
    if not result.ok and "@@end" not in result.stdout:
        raise TransportError(transport.host, f"probe failed (exit {result.exited}): {result.stderr.strip()}")
    return probes.parse_probe(result.stdout, unit)


def resolve_unit(transport: Transport, found: ProbeResult, unit: str | None) -> ProbeResult:
    """The unit to work on: the one given, or the single unit whose ExecStart runs sglang."""
    if unit:
        state = found.state
        if state is None or not state.fragment_path:
            raise ConfigError(f"unit {unit} not found", source=transport.host)
        return found
    if not found.candidates:
        raise ConfigError("no systemd unit runs sglang; pass --unit", source=transport.host)
    if len(found.candidates) > 1:
        names = ", ".join(found.candidates)
        raise ConfigError(f"several units run sglang ({names}); pass --unit", source=transport.host)
    return found


def detect_unit(transport: Transport) -> str:
    """The one unit whose ExecStart runs sglang (a read-only probe; several or none → ConfigError)."""
    return resolve_unit(transport, probe(transport, None, detect_only=True), None).candidates[0]


def read_unit(transport: Transport, unit: str | None) -> tuple[ProbeResult, UnitSources]:
    """Probe the unit (or the one running sglang) and build the core's input from what was read."""
    found = resolve_unit(transport, probe(transport, unit), unit)
    return found, sources_from_probe(found)


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


def sources_from_probe(found: ProbeResult) -> UnitSources:
    """Build the core's input from what the probe read (fragment, drop-ins, environment files)."""
    state = found.state
    assert state is not None
    fragment = found.files.get(state.fragment_path)
    if fragment is None or not fragment.exists:
        raise ConfigError(f"cannot read unit file {state.fragment_path}", source=state.unit)
    dropins = tuple(
        SourceFile(path=p, text=found.files[p].text)
        for p in state.dropin_paths
        if p in found.files and found.files[p].exists
    )
    env_files: dict[str, str | None] = {}
    for path, remote in found.files.items():
        if path == state.fragment_path or path in state.dropin_paths:
            continue
        env_files[path] = remote.text if remote.exists else None
    return UnitSources(
        fragment=SourceFile(path=fragment.path, text=fragment.text), dropins=dropins, env_files=env_files
    )


def commit(
    transport: Transport,
    unit: str,
    writes: list[FileWrite],
    *,
    epoch: int,
    restart: bool = True,
    lock_wait: int = 30,
    analyze: bool = False,
    take_lock: bool = True,
) -> CommitReport:
    """Run the remote transaction (``templates/commit.sh.j2``) and parse what it reports.

    ``take_lock=False`` when the caller already holds the unit's lock (:func:`unit_lock`)."""
    script = templates.render(
        "commit.sh.j2",
        unit=unit,
        take_lock=take_lock,
        lock_path=lock_path(unit),
        lock_wait=int(lock_wait),
        files=[w.render_args() for w in writes],
        epoch=epoch,
        restart=restart,
        analyze=analyze,
    )
    result = transport.run("bash -s", stdin=script, timeout=lock_wait + 120)
    report = CommitReport()
    for line in result.stdout.splitlines():
        head, _, rest = line.partition(" ")
        if head == "@@backup":
            index, _, backup = rest.partition(" ")
            report.backups[writes[int(index)].path] = backup
        elif head == "@@restart":
            report.restart_epoch = float(rest)
        elif head == "@@restarted":
            report.invocation_id = rest.strip() or None
        elif head == "@@analyze":
            report.analyze.append(rest)
    if result.ok:
        return report
    errors = [line[len("@@error ") :] for line in result.stderr.splitlines() if line.startswith("@@error ")]
    message = errors[-1] if errors else (result.stderr.strip().splitlines() or [f"exit {result.exited}"])[-1]
    kind, _, detail = message.partition(" ")
    if result.exited == 75:
        raise ConflictError(transport.host, f"another remediation holds the lock on {transport.host}")
    if result.exited == 76:
        raise ConflictError(transport.host, f"aborted, nothing written: {detail}")
    raise RemediationError(transport.host, f"commit failed at {kind or 'step'}: {detail or message}")


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
        if exc.result.exited == 75:
            raise ConflictError(transport.host, f"another remediation holds the lock on {transport.host}") from None
        raise RemediationError(transport.host, f"cannot take the lock {lock_path(unit)}: {exc}") from exc


def planned_steps(unit: str, writes: list[FileWrite], epoch: int, *, restart: bool) -> list[str]:
    steps = [f"flock {lock_path(unit)} (wait ≤ 30 s)"]
    for w in writes:
        steps.append(f"check sha256({w.path}) == {_sha256(w.old_text)[:12]}… (abort if it changed)")
    for w in writes:
        if w.backup_tag:
            steps.append(f"cp -p {w.path} {w.path}.bak.{w.backup_tag}.{epoch}")
    for w in writes:
        steps.append(f"write {w.path} atomically (temp file, same mode/owner, fsync, rename, fsync dir)")
    if restart:
        steps += [
            "systemctl daemon-reload (then require NeedDaemonReload=no)",
            f"systemctl reset-failed {unit}",
            f"systemctl restart {unit}",
            "wait for /health 200 and max_total_num_tokens",
        ]
    return steps


@contextmanager
def host_outcome(result: HostResult, now: Callable[[], float] = time.time) -> Iterator[None]:
    """A host's errors become its result — one failing host never aborts the others — and its end time
    is recorded. An outcome already set (``failed`` after a failed undo, say) is kept."""
    try:
        yield
    except RemediateError as exc:
        result.error = str(exc)
        result.exit_code = exc.exit_code
        if isinstance(exc, UnhealthyError) and exc.journal:
            result.journal = exc.journal
        if result.outcome == "not_attempted":
            result.outcome = "unreachable" if isinstance(exc, TransportError) and exc.exit_code == 3 else "failed"
    finally:
        result.finished_at = now()


class Timer:
    def __init__(self, result: HostResult, progress: ProgressFn | None) -> None:
        self.result = result
        self.progress = progress

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - start
            self.result.phases.append(Phase(name, seconds))
            if self.progress:
                self.progress(self.result.host, name, f"{seconds:.2f}s")


def endpoint_of(found: ProbeResult, options: RunOptions) -> tuple[str, int]:
    assert found.state is not None
    for argv in found.state.exec_argvs:
        if any("sglang" in word for word in argv):
            host, port = probes.server_endpoint(argv)
            return host, options.server_port or port
    return "127.0.0.1", options.server_port or 30000


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
    back the same way and wait for the old server (outcome ``rolled_back``), unless ``--no-rollback``.

    The caller holds the unit's lock (:func:`unit_lock`) from before its read until this returns."""
    result.outcome = "failed"

    def show_progress(phase: str, elapsed: float, line: str) -> None:
        if timer.progress:
            timer.progress(result.host, "waiting", f"{phase} · {elapsed:.0f}s · {line}")

    try:
        with timer.phase("commit"):
            report = commit(
                transport, unit, writes, epoch=epoch, lock_wait=options.lock_wait, analyze=analyze, take_lock=False
            )
        result.backups = list(report.backups.values())
        result.backup = result.backups[0] if result.backups else None
        result.warnings += [f"systemd-analyze: {line}" for line in report.analyze]
        with timer.phase("wait"):
            healthy = _wait(transport, unit, endpoint, options, report, show_progress)
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
        report = commit(transport, unit, undo, epoch=int(time.time()), lock_wait=options.lock_wait, take_lock=False)
        result.max_total_num_tokens = _wait(transport, unit, endpoint, options, report).tokens
    except RemediateError as exc:
        result.outcome = "failed"
        raise RemediationError(
            result.host, f"{result.error or 'remediation failed'}; the rollback failed too: {exc}"
        ) from exc
