"""Orchestration for backups: list them, roll back to one (as safely as rolling forward), prune.

A rollback is the same remote transaction as a remediation: lock, compare-and-swap, backup of the
current bytes (``.bak.rollback.<epoch>``, so a rollback can itself be rolled back), atomic write,
daemon-reload, reset-failed, restart, wait healthy — and if the restored server does not come back,
the pre-rollback bytes are put back the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from remediate.core.backups import (
    Backup,
    choose,
    make_backup,
    mark_truncated,
    newest_first,
    rejected_backup,
    select_prune,
    settings_diff,
    settings_or_none,
    swap,
    validate_backup,
)
from remediate.core.probe import ProbeResult, parse_probe, refuse_unsafe
from remediate.core.unitfile.dropin import created_dropin
from remediate.core.unitfile.edit import SourceFile, UnitSources
from remediate.core.unitfile.report import unified_diff
from remediate.core.unitfile.sources import refuse_template_edit, shared_with_instances
from remediate.core.unitfile.unitname import normalise_unit
from remediate.errors import LockHeldError, RemediationError, TransportError
from remediate.host.common import templates
from remediate.host.common.commit import FileWrite, planned_steps
from remediate.host.common.health import Healthy
from remediate.host.common.lock import LOCK_DIR, LOCK_HELD_EXIT, Held, run_locked
from remediate.host.common.options import RunOptions
from remediate.host.common.outcome import Timer, record_settings, record_unit
from remediate.host.common.probe import endpoint_of, engine_of, read_unit, run_read_only
from remediate.host.common.transaction import Change, transact
from remediate.host.instances.instances import planned_roll, roll_instances
from remediate.models import BackupListing, BackupRow, HostResult, ProgressFn
from remediate.transport.base import Transport


def unit_files(found: ProbeResult) -> list[str]:
    assert found.state is not None
    files = [found.state.fragment_path, *found.state.dropin_paths]
    files += [p for p in found.files if p not in files]
    return files


def list_backups(transport: Transport, found: ProbeResult) -> list[Backup]:
    """Every ``<file>.bak*`` next to the unit's files, newest first (one round trip)."""
    script = templates.render("backups.sh.j2", files=unit_files(found))
    result = transport.run("bash -s", stdin=script, timeout=60)
    if "@@end" not in result.stdout:
        why = result.stderr.strip() or "its output ended early"
        raise TransportError(transport.host, f"listing backups failed (exit {result.exited}): {why}")
    listed = parse_probe(result.stdout, None).files
    backups = []
    for remote in listed.values():
        backup = make_backup(remote.path, text=remote.text, sha256=remote.sha256, size=remote.size, mtime=remote.mtime)
        if backup is not None and backup.original in found.files:
            backups.append(mark_truncated(backup, found.files[backup.original].size))
    for line in result.stdout.split("\n"):  # not splitlines(): a path may hold \x1c, \x85 …
        if line.startswith("@@rejected "):
            flagged = rejected_backup(line.removeprefix("@@rejected "))
            if flagged is not None and flagged.original in found.files:
                backups.append(flagged)
    return newest_first(backups)


def backups_host(
    transport: Transport,
    options: RunOptions,
    *,
    label: str | None = None,
    prune_keep: int | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """List (and with ``prune_keep``, prune) a host's backups; the listing lands in ``backup_listing``."""

    def body(found: ProbeResult, sources: UnitSources, result: HostResult) -> None:
        state = found.state
        assert state is not None
        backups = list_backups(transport, found)
        current = settings_or_none(sources)
        current_sha = {p: f.sha256 for p, f in found.files.items() if f.exists}
        doomed = select_prune(backups, prune_keep, current_sha) if prune_keep is not None else []
        rows: list[BackupRow] = []
        for b in backups:
            restored = None if b.unsafe else settings_or_none(swap(sources, b.original, b.text))
            rows.append(
                BackupRow(
                    path=b.path,
                    original=b.original,
                    time=b.time,
                    time_source=b.time_source,
                    size=b.size,
                    sha256=b.sha256,
                    identical_to_current=not b.unsafe and b.sha256 == current_sha.get(b.original),
                    changes=() if b.unsafe else tuple(settings_diff(current, restored)),
                    prune=b in doomed,
                    truncated=b.truncated,
                    unsafe=b.unsafe,
                )
            )
        result.backup_listing = BackupListing(tuple(rows))
        if doomed and not options.dry_run:
            deleted = _prune(transport, state.unit, doomed, options.lock_wait)
            result.backup_listing = BackupListing(tuple(rows), deleted=tuple(deleted))
            result.changed = bool(deleted)
        elif doomed:
            result.backup_listing = BackupListing(tuple(rows), would_delete=tuple(b.path for b in doomed))
        result.outcome = "unchanged"  # the unit is untouched; `deleted` lists pruned backups

    return run_read_only(transport, options, body, label=label, now=now)


def _prune(transport: Transport, unit: str, doomed: list[Backup], lock_wait: int) -> list[str]:
    directory = doomed[0].path.rsplit("/", 1)[0] or "/"
    script = templates.render(
        "prune.sh.j2",
        unit=normalise_unit(unit),
        lock_dir=LOCK_DIR,
        lock_wait=lock_wait,
        backups=[{"path": b.path, "sha256": b.sha256} for b in doomed],
        directory=directory,
    )
    result = transport.run("bash -s", stdin=script, timeout=lock_wait + 60)
    if result.exited == LOCK_HELD_EXIT:
        raise LockHeldError(transport.host)
    if not result.ok:
        raise RemediationError(transport.host, f"prune failed: {result.stderr.strip()}")
    return [line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("@@deleted ")]


def rollback_host(
    transport: Transport,
    options: RunOptions,
    *,
    to: str = "latest",
    label: str | None = None,
    progress: ProgressFn | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """Restore a backup (``latest`` or a path) as a verified transaction; outcome ``restored``."""

    def body(held: Held, result: HostResult, timer: Timer) -> None:
        _rollback_locked(transport, replace(options, unit=held.unit), held.found, to, result, timer, now)

    return run_locked(transport, options, body, label=label, progress=progress, now=now)


def _rollback_locked(
    transport: Transport,
    options: RunOptions,
    already: ProbeResult | None,
    to: str,
    result: HostResult,
    timer: Timer,
    now: Callable[[], float],
) -> None:
    with timer.phase("read"):
        found, sources = read_unit(transport, options.unit, already)
        unit = record_unit(result, found, sources).unit
        backups = list_backups(transport, found)
    with timer.phase("plan"):
        created = created_dropin(sources, [b.original for b in backups]) if to == "latest" else None
        if created is not None:
            # remediate's drop-in of this instance, never edited since it was created: a rollback removes it.
            writes = _plan_dropin_removal(found, sources, created, unit, result, transport.host)
            undo = "put the drop-in back"
        else:
            chosen = choose(backups, to)
            restored = sources
            for b in chosen:
                restored = swap(restored, b.original, b.text)
            for b in chosen:
                validate_backup(b, restored, unit)
            current = settings_or_none(sources)
            after = settings_or_none(restored)
            writes = [
                FileWrite(b.original, found.files[b.original].text, b.text, backup_tag="rollback")
                for b in chosen
                if b.text != found.files[b.original].text
            ]
            if not (options.all_instances and shared_with_instances(unit, [w.path for w in writes])):
                refuse_template_edit(unit, [w.path for w in writes], flag="--all-instances")
            refuse_unsafe(found, [w.path for w in writes], transport.host)
            result.summary = [f"restore {b.path} → {b.original}" for b in chosen]
            result.summary += settings_diff(current, after) if writes else []
            result.diff = "".join(unified_diff(w.path, w.old_text, w.new_text) for w in writes)
            result.changed = bool(writes)
            record_settings(result, current, after)
            undo = "put the pre-rollback unit back"
        epoch = int(now())
        result.steps = planned_steps(
            unit, writes, epoch, restart=True, lock_wait=options.lock_wait,
            capacity=engine_of(found).capacity_name,
        )  # fmt: skip
    if not writes:
        result.outcome = "unchanged"
        result.notes.append("the unit already has the backup's bytes: nothing to restore")
        return
    if options.dry_run:
        result.outcome = "unchanged"
        result.is_dry_run = True
        if options.all_instances and shared_with_instances(unit, [w.path for w in writes]):
            result.notes.append(planned_roll(transport, unit))
        return

    def record(healthy: Healthy) -> None:
        result.max_total_num_tokens = healthy.tokens
        result.target_tokens = options.target_tokens

    change = Change(
        unit=unit,
        writes=tuple(writes),
        endpoint=endpoint_of(found, options),
        options=replace(options, unit=unit),
        epoch=epoch,
        verify=record,
        success="restored",
        undo_note=undo,
        engine=engine_of(found),
    )
    if options.all_instances and shared_with_instances(unit, [w.path for w in writes]):
        roll_instances(transport, change, found, result, timer, lambda *_: None)  # a restore checks the tokens only
    else:
        transact(transport, change, result, timer)


def _plan_dropin_removal(
    found: ProbeResult, sources: UnitSources, dropin: SourceFile, unit: str, result: HostResult, host: str
) -> list[FileWrite]:
    """The removal of the instance drop-in remediate created (its backup said "absent"); the instance is then
    reloaded, restarted and health-checked like any restore; the template and the other instances are not
    touched."""
    restored = replace(sources, dropins=tuple(d for d in sources.dropins if d.path != dropin.path))
    current, after = settings_or_none(sources), settings_or_none(restored)
    refuse_unsafe(found, [dropin.path], host)
    result.summary = [f"remove {dropin.path} (created by remediate)", *settings_diff(current, after)]
    result.diff = unified_diff(dropin.path, dropin.text, "")
    result.changed = True
    record_settings(result, current, after)
    return [FileWrite(dropin.path, dropin.text, "", backup_tag="rollback", new_absent=True)]
