"""Orchestration for one host: probe → plan → commit → wait → verify, rolling back on failure.

The remote side of every step is one shell script rendered from ``templates/`` and run in one
round trip over the host's single SSH connection. Nothing here formats output for humans; the CLI
renders the :class:`~remediate.models.HostResult` this returns.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from remediate import probes, templates
from remediate.errors import (
    ConfigError,
    ConflictError,
    RemediateError,
    RemediationError,
    TransportError,
    UnhealthyError,
)
from remediate.health import Healthy, fetch_tokens, wait_healthy
from remediate.models import HostResult, Phase, RunOptions
from remediate.probes import ProbeResult
from remediate.transport.base import Transport
from remediate.unitfile.edit import EditPlan, SourceFile, UnitSources, plan_edit
from remediate.unitfile.report import summary_lines, unified_diff

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


def probe(transport: Transport, unit: str | None, extra_files: tuple[str, ...] = ()) -> ProbeResult:
    """Read everything needed to plan, in one round trip."""
    script = templates.render(
        "probe.sh.j2", unit=unit or "", properties=probes.SHOW_PROPERTIES, extra_files=extra_files
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
) -> CommitReport:
    """Run the remote transaction (``templates/commit.sh.j2``) and parse what it reports."""
    script = templates.render(
        "commit.sh.j2",
        unit=unit,
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


def _steps(unit: str, writes: list[FileWrite], epoch: int, *, restart: bool) -> list[str]:
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


class _Timer:
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


def _fill_plan(result: HostResult, plan: EditPlan) -> None:
    result.flags_before = {
        "mem_fraction_static": plan.before.mem_fraction_static,
        "chunked_prefill_size": plan.before.chunked_prefill_size,
    }
    result.flags_after = {
        "mem_fraction_static": plan.after.mem_fraction_static,
        "chunked_prefill_size": plan.after.chunked_prefill_size,
    }
    result.env_before = {"PYTORCH_CUDA_ALLOC_CONF": plan.before.alloc_conf}
    result.env_after = {"PYTORCH_CUDA_ALLOC_CONF": plan.after.alloc_conf}
    result.diff = "".join(unified_diff(f.path, f.old_text, f.new_text) for f in plan.files)
    result.summary = summary_lines(plan)
    result.notes = list(plan.notes)
    result.changed = plan.is_changed


def _endpoint(found: ProbeResult, options: RunOptions) -> tuple[str, int]:
    assert found.state is not None
    for argv in found.state.exec_argvs:
        if any("sglang" in word for word in argv):
            host, port = probes.server_endpoint(argv)
            return host, options.server_port or port
    return "127.0.0.1", options.server_port or 30000


def verify_server_args(host: str, info: dict[str, Any] | None, plan: EditPlan) -> None:
    """The server that answers must run the values we wrote (its resolved ServerArgs are in the info
    document). Catches a restart that did not take — and another server answering on that port."""
    if not info:
        return
    expected = {
        "mem_fraction_static": plan.after.mem_fraction_static,
        "chunked_prefill_size": plan.after.chunked_prefill_size,
    }
    for key, want in expected.items():
        got = info.get(key)
        if want is None or got is None:
            continue
        try:
            same = Decimal(str(got)) == Decimal(str(want))
        except InvalidOperation:
            same = str(got) == str(want)
        if not same:
            raise RemediationError(
                host,
                f"the server reports {key}={got}, but the unit now sets {want}: "
                "the restart did not take effect, or another server answers on that port",
            )


def _verify_tokens(result: HostResult, healthy: Healthy, options: RunOptions) -> None:
    result.max_total_num_tokens = healthy.tokens
    result.target_tokens = options.target_tokens
    if options.min_tokens is not None and healthy.tokens < options.min_tokens:
        raise RemediationError(
            result.host,
            f"max_total_num_tokens={healthy.tokens:,} is below --min-tokens {options.min_tokens:,}",
        )
    gap = result.token_gap
    if gap is not None and gap < 0:
        result.warnings.append(
            f"max_total_num_tokens {healthy.tokens:,} is {abs(gap) * 100:.1f}% below the target "
            f"{options.target_tokens:,}: capacity traded for stability"
        )


def _already_healthy(transport: Transport, found: ProbeResult, options: RunOptions) -> int | None:
    state = found.state
    assert state is not None
    if state.active_state != "active" or state.needs_daemon_reload:
        return None
    tokens, _ = fetch_tokens(transport, *_endpoint(found, options))
    return tokens


def _is_running(found: ProbeResult) -> bool:
    state = found.state
    assert state is not None
    return state.active_state == "active" and state.main_pid > 0 and not state.needs_daemon_reload


def _wait_for_running(
    transport: Transport, found: ProbeResult, options: RunOptions, result: HostResult, timer: _Timer
) -> int | None:
    """The unit is already remediated and running but not answering yet: it is loading (a start by hand,
    or another remediation whose lock was released after its restart). Restarting it would throw the
    load away (minutes on a real host) and make that other run roll back; wait for it instead."""
    state = found.state
    assert state is not None

    def show_progress(phase: str, elapsed: float, line: str) -> None:
        if timer.progress:
            timer.progress(result.host, "wait", f"{phase} · {elapsed:.0f}s · {line}")

    try:
        healthy = wait_healthy(
            transport,
            state.unit,
            _endpoint(found, options),
            timeout=options.timeout,
            restart_epoch=None,
            invocation_id=state.invocation_id or None,
            on_progress=show_progress,
        )
    except UnhealthyError as exc:
        result.notes.append(f"the running server did not get healthy ({exc})")
        return None
    return healthy.tokens


def remediate_host(
    transport: Transport,
    options: RunOptions,
    *,
    label: str | None = None,
    progress: ProgressFn | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """The whole OOM remediation of one host. Never raises RemediateError: it lands in the result."""
    result = HostResult(host=label or transport.host, started_at=now())
    timer = _Timer(result, progress)
    try:
        _remediate(transport, options, result, timer, now)
    except RemediateError as exc:
        result.error = str(exc)
        result.exit_code = exc.exit_code
        if isinstance(exc, UnhealthyError):
            result.journal = exc.journal
        if result.outcome == "not_attempted":
            result.outcome = "unreachable" if isinstance(exc, TransportError) and exc.exit_code == 3 else "failed"
    finally:
        result.finished_at = now()
    return result


def _remediate(
    transport: Transport, options: RunOptions, result: HostResult, timer: _Timer, now: Callable[[], float]
) -> None:
    from datetime import UTC, datetime

    with timer.phase("connect"):
        open_fn = getattr(transport, "open", None)
        if open_fn:
            open_fn()
    with timer.phase("read"):
        found = resolve_unit(transport, probe(transport, options.unit), options.unit)
        assert found.state is not None
        unit = found.state.unit
        result.unit = unit
        result.unit_path = found.state.fragment_path
        sources = sources_from_probe(found)
    with timer.phase("plan"):
        plan = plan_edit(sources, options.desired, now=datetime.fromtimestamp(now(), tz=UTC))
        _fill_plan(result, plan)
        epoch = int(now())
        writes = [FileWrite(f.path, f.old_text, f.new_text) for f in plan.files]
        result.steps = _steps(unit, writes, epoch, restart=True)
    if not plan.is_changed:
        tokens = _already_healthy(transport, found, options)
        if tokens is None and not options.dry_run and _is_running(found):
            with timer.phase("wait"):
                tokens = _wait_for_running(transport, found, options, result, timer)
        if tokens is not None:
            result.outcome = "unchanged"
            result.max_total_num_tokens = tokens
            result.target_tokens = options.target_tokens
            result.steps = []
            return
        result.notes.append("the unit is already remediated but the server is not healthy: restarting it")
    if options.dry_run:
        # Nothing was changed: the outcome says so; `changed` and the diff say what a real run would do.
        result.outcome = "unchanged"
        result.extra["dry_run"] = True
        return
    result.outcome = "failed"
    endpoint = _endpoint(found, options)

    def show_progress(phase: str, elapsed: float, line: str) -> None:
        if timer.progress:
            timer.progress(result.host, "wait", f"{phase} · {elapsed:.0f}s · {line}")

    try:
        with timer.phase("commit"):
            report = commit(
                transport,
                unit,
                writes,
                epoch=epoch,
                lock_wait=options.lock_wait,
                analyze=found.has_systemd_analyze,
            )
        result.backups = list(report.backups.values())
        result.backup = result.backups[0] if result.backups else None
        result.warnings += [f"systemd-analyze: {line}" for line in report.analyze]
        with timer.phase("wait"):
            healthy = wait_healthy(
                transport,
                unit,
                endpoint,
                timeout=options.timeout,
                restart_epoch=report.restart_epoch,
                invocation_id=report.invocation_id,
                on_progress=show_progress,
            )
        with timer.phase("verify"):
            verify_server_args(result.host, healthy.info, plan)
            _verify_tokens(result, healthy, options)
        result.outcome = "remediated"
    except ConflictError:
        raise  # nothing was written
    except RemediationError as exc:
        if isinstance(exc, UnhealthyError):
            result.journal = exc.journal
        if not options.rollback or not writes:
            raise
        result.error = str(exc)
        with timer.phase("rollback"):
            _rollback(transport, unit, writes, endpoint, options, result)
        result.outcome = "rolled_back"
        result.error = f"{exc}; rolled back to the previous unit"
        result.exit_code = 1


def _rollback(
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
        report = commit(transport, unit, undo, epoch=int(time.time()), lock_wait=options.lock_wait)
        healthy = wait_healthy(
            transport,
            unit,
            endpoint,
            timeout=options.timeout,
            restart_epoch=report.restart_epoch,
            invocation_id=report.invocation_id,
        )
        result.max_total_num_tokens = healthy.tokens
    except RemediateError as exc:
        result.outcome = "failed"
        raise RemediationError(
            result.host, f"{result.error or 'remediation failed'}; the rollback failed too: {exc}"
        ) from exc


def status_host(
    transport: Transport,
    options: RunOptions,
    *,
    label: str | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """Read-only: the unit, its state, current settings, tokens, and whether it is remediated."""
    from datetime import UTC, datetime

    result = HostResult(host=label or transport.host, started_at=now())
    try:
        open_fn = getattr(transport, "open", None)
        if open_fn:
            open_fn()
        found = resolve_unit(transport, probe(transport, options.unit), options.unit)
        assert found.state is not None
        result.unit = found.state.unit
        result.unit_path = found.state.fragment_path
        plan = plan_edit(sources_from_probe(found), options.desired, now=datetime.fromtimestamp(now(), tz=UTC))
        _fill_plan(result, plan)
        result.outcome = "unchanged"  # read-only: nothing was changed
        state = found.state
        result.extra = {
            "remediated": not plan.is_changed,
            "active_state": state.active_state,
            "sub_state": state.get("SubState"),
            "n_restarts": state.n_restarts,
            "need_daemon_reload": state.needs_daemon_reload,
        }
        if state.needs_daemon_reload:
            result.warnings.append("NeedDaemonReload=yes: the running server does not use the unit on disk")
        if state.active_state == "active":
            tokens, _ = fetch_tokens(transport, *_endpoint(found, options))
            result.max_total_num_tokens = tokens
            result.target_tokens = options.target_tokens
    except RemediateError as exc:
        result.error = str(exc)
        result.exit_code = exc.exit_code
        result.outcome = "unreachable" if isinstance(exc, TransportError) and exc.exit_code == 3 else "failed"
    finally:
        result.finished_at = now()
    return result
