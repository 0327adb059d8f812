"""`oom --all-instances`: one change to a template (or its shared drop-in or EnvironmentFile), rolled through
its running instances.

A file every instance reads changes every instance at its next start, so the run takes every lock involved:
the canary's (the instance named: the run's own, lock.py), the template's (``templates/instances.sh.j2``,
which also lists the instances systemd has loaded) and each other instance's (``lock.locked_read``, which
reads its state and command line: its own port). Then the canary goes through the one-host transaction
(transaction.transact: compare-and-swap, backup, atomic write, daemon-reload, restart, wait, verify, undo),
and each other *running* instance is restarted on the new bytes and health-checked in turn (its own port
and journal; an instance that is not running is never started). When one does not come up, the template's
old bytes are put back, and that instance and the ones already restarted are restarted on them and waited for.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from remediate.core.instances import (
    RUNNING,
    instances_pattern,
    is_reached,
    parse_instances,
    roll_order,
    settings_after,
    template_of,
)
from remediate.core.probe import ProbeResult, ServiceState
from remediate.core.unitfile.edit import UnitSettings
from remediate.errors import CommandError, ConfigError, LockHeldError, RemediateError, RemediationError
from remediate.host.common import templates
from remediate.host.common.commit import CommitReport, FileWrite, commit
from remediate.host.common.health import Healthy, wait_healthy
from remediate.host.common.lock import HEARTBEAT_TIMEOUT_S, LOCK_DIR, LOCK_HELD_EXIT, READ_TIMEOUT_S, locked_read
from remediate.host.common.outcome import Timer
from remediate.host.common.probe import endpoint_of, sources_from_probe
from remediate.host.common.transaction import Change, record_change, transact
from remediate.models import HostResult, InstanceOutcome
from remediate.transport.base import Transport

# (instance, its healthy server, the settings it must now run: None when unreadable); raises RemediationError
VerifyFn = Callable[[str, Healthy, UnitSettings | None], object]


@dataclass
class Member:
    """One instance of the template in this run, and what happened to it."""

    unit: str
    found: ProbeResult
    after: UnitSettings | None = None  # what it runs once restarted on the new bytes
    is_reached: bool = True  # the change reaches it (its own drop-in may set the values instead)
    # remediated (restored) | unchanged | rolled_back | failed | not_running | not_restarted
    outcome: str = "not_restarted"
    tokens: int | None = None
    error: str | None = None

    @property
    def is_running(self) -> bool:
        return self.found.state is not None and self.found.state.active_state in RUNNING

    def outcome_record(self) -> InstanceOutcome:
        return InstanceOutcome(self.unit, self.outcome, self.tokens, self.error)


def _lock_template(transport: Transport, template: str, wait: int, locks: ExitStack) -> str:
    """Take the template's lock (kept until ``locks`` closes) and list its loaded instances."""
    script = templates.render(
        "instances.sh.j2",
        template=template,
        pattern=instances_pattern(template),
        lock_dir=LOCK_DIR,
        lock_wait=int(wait),
        heartbeat_timeout=HEARTBEAT_TIMEOUT_S,
    )
    try:
        return locks.enter_context(
            transport.hold("bash -c " + shlex.quote(script), ready="@@end", timeout=wait + READ_TIMEOUT_S)
        )
    except CommandError as exc:
        if exc.result.exited == LOCK_HELD_EXIT:
            raise LockHeldError(transport.host) from None
        raise RemediationError(transport.host, f"cannot take the lock of {template}: exit {exc.result.exited}") from exc


def planned_roll(transport: Transport, unit: str) -> str:
    """--dry-run: the order a real run restarts the instances in (read-only: no lock taken)."""
    template = template_of(unit)
    if template is None:
        return ""
    script = templates.render("instances.sh.j2", template=template, pattern=instances_pattern(template))
    listed = parse_instances(transport.run("bash -c " + shlex.quote(script), timeout=READ_TIMEOUT_S).stdout, template)
    states = {i.unit: i for i in listed}
    order = roll_order(listed, unit)
    running = [u for u in order if u == unit or (u in states and states[u].is_running)]
    idle = [u for u in order if u not in running]
    note = f"--all-instances: a real run restarts, in turn: {', '.join(running)}"
    return note + (f"; not running, never started: {', '.join(idle)}" if idle else "")


def roll_instances(
    transport: Transport, change: Change, canary: ProbeResult, result: HostResult, timer: Timer, verify: VerifyFn
) -> None:
    """The template's change through the canary's transaction, then every other running instance restarted
    and verified in turn; ``result.instances`` lists each instance's outcome."""
    template = template_of(change.unit)
    if template is None:
        raise ConfigError(f"--all-instances: {change.unit} is no instance of a template")
    with ExitStack() as locks:
        with timer.phase("instances"):  # the template's lock, the listing, each other instance's lock and read
            listed = parse_instances(_lock_template(transport, template, change.options.lock_wait, locks), template)
            members = [Member(change.unit, canary)]
            new_texts = {w.path: w.new_text for w in change.writes if not w.new_absent}
            for unit in roll_order(listed, change.unit)[1:]:
                found = locks.enter_context(locked_read(transport, unit, change.options.lock_wait))
                before, after = settings_after(sources_from_probe(found), new_texts)
                members.append(Member(unit, found, after, is_reached(before, after)))
        try:
            _roll(transport, change, template, members, result, timer, verify)
        finally:
            result.instances = tuple(m.outcome_record() for m in members)


def _roll(
    transport: Transport,
    change: Change,
    template: str,
    members: list[Member],
    result: HostResult,
    timer: Timer,
    verify: VerifyFn,
) -> None:
    first = members[0]
    transact(transport, change, result, timer)  # the canary: commit, wait, verify; undone there if it fails
    first.outcome, first.tokens, first.error = result.outcome, result.max_total_num_tokens, result.error
    if result.outcome != change.success:
        return
    done = [first]
    for member in members[1:]:
        if not member.is_running:
            member.outcome = "not_running"
            continue
        if not member.is_reached:
            member.outcome = "unchanged"  # its own files set the values: a restart would change nothing
            continue
        try:
            with timer.phase(f"restart {member.unit}"):
                note = f"remediate {change.verb} --all-instances: {member.unit} restarted on the new {template}"
                healthy = _restart(transport, change, member, [], note, timer)
                verify(member.unit, healthy, member.after)
        except RemediateError as exc:
            member.outcome, member.error = "failed", _detail(exc)
            _roll_back(transport, change, template, member, done, result, timer)
            return
        member.outcome, member.tokens = change.success, healthy.tokens
        done.append(member)


def _restart(
    transport: Transport, change: Change, member: Member, writes: list[FileWrite], note: str, timer: Timer
) -> Healthy:
    """Restart one instance (after writing ``writes``, in the same commit script) and wait for its server."""
    return _wait(transport, change, member, _commit(transport, member, writes, note), timer)


def _commit(transport: Transport, member: Member, writes: list[FileWrite], note: str) -> CommitReport:
    return commit(transport, member.unit, writes, epoch=int(time.time()), journal=note)


def _wait(transport: Transport, change: Change, member: Member, report: CommitReport, timer: Timer) -> Healthy:
    """The same health wait as oom's, on this instance's own port (its command line) and journal."""
    state = ServiceState(unit=member.unit, properties=report.state) if report.state else None
    return wait_healthy(
        transport,
        member.unit,
        endpoint_of(member.found, change.options),
        timeout=change.options.timeout,
        restart_epoch=report.restart_epoch,
        invocation_id=report.invocation_id,
        on_progress=timer.waiting,
        initial_state=state,
        sleep=timer.sleep,
    )


def _roll_back(
    transport: Transport,
    change: Change,
    template: str,
    failed: Member,
    done: list[Member],
    result: HostResult,
    timer: Timer,
) -> None:
    """``failed`` did not come up on the new bytes: put the old ones back (restarting it), then restart the
    instances already restarted on them, each waited for. Unless --no-rollback."""
    why = f"{failed.unit} did not come up on the new {template}: {failed.error}"
    result.outcome = "failed"  # until the old bytes are back and every instance restarted came up on them
    if not change.options.rollback:
        record_change(result, change, "failed", "; ".join(result.summary), error=why)
        restarted = ", ".join(m.unit for m in done)
        raise RemediationError(result.host, f"{why}; --no-rollback: the new bytes stay ({restarted} run on them)")
    undo = [
        FileWrite(w.path, w.new_text, w.old_text, backup_tag=None, old_absent=w.new_absent, new_absent=w.old_absent)
        for w in change.writes
    ]
    with timer.phase("rollback"):
        for member, writes in [(failed, undo), *((m, []) for m in done)]:
            note = f"remediate undo {member.unit}: restarted on the previous bytes of {template}"
            try:
                report = _commit(transport, member, writes, note)
            except RemediateError as exc:
                if writes:  # the old bytes may not be back: nothing else is restarted on a template in doubt
                    record_change(result, change, "failed", "; ".join(result.summary), error=why)
                    raise RemediationError(result.host, f"{why}; the rollback failed too: {_detail(exc)}") from exc
                member.outcome, member.error = "failed", _detail(exc)
                continue
            try:
                healthy = _wait(transport, change, member, report, timer)
            except RemediateError as exc:
                member.outcome, member.error = "failed", _detail(exc)
                continue
            member.outcome, member.tokens = "rolled_back", healthy.tokens
    broken = [m.unit for m in [failed, *done] if m.outcome == "failed"]
    back = ", ".join(m.unit for m in [failed, *done] if m.outcome == "rolled_back")
    message = f"{why}; {template} rolled back, restarted on the old bytes: {back or 'none'}"
    if broken:
        message += f"; did not come up on the old bytes either: {', '.join(broken)}"
        record_change(result, change, "failed", "; ".join(result.summary), error=message)
        raise RemediationError(result.host, message)
    result.outcome, result.error, result.exit_code = "rolled_back", message, 1
    result.max_total_num_tokens = done[0].tokens if done else None
    record_change(result, change, "rolled_back", "; ".join(result.summary), error=message)


def _detail(exc: RemediateError) -> str:
    return str(getattr(exc, "message", exc))
