"""Several sglang units on one host: a command's one-unit run done for each unit ``--unit`` selects (a glob,
several names) or, without ``--unit``, for each unit detection found — in turn, on the host's one
connection, each under its own lock (never two transactions on one host at once).

`oom` acts only on the units whose latest run crashed, by the crash evidence `diagnose` reads, when none was
named exactly (no ``--unit``, or a glob); it refuses in one line, listing the units, when none or an
unreadable set is left. One exact ``--unit`` (or one unit on the host) is the one-unit run as it always was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from remediate.core.units import (
    UnitCrash,
    UnitSelection,
    crashed_units,
    has_crashed,
    parse_unit_listing,
    parse_unit_spec,
    select_units,
)
from remediate.errors import ConfigError, RemediateError, TransportError
from remediate.host.common import templates
from remediate.host.common.options import RunOptions
from remediate.host.common.outcome import host_outcome, new_result
from remediate.host.common.probe import read_unit
from remediate.host.diagnose.diagnose import GATE_LINES, read_diagnosis_evidence
from remediate.models import HostResult
from remediate.transport.base import Transport

OneUnit = Callable[[Transport, RunOptions], HostResult]
"""A command's run on one unit of the host (``options.unit`` names it, or is None: the one detected)."""

LIST_TIMEOUT_S = 30  # the listing's own bound is 10 s per systemctl (templates/units.sh.j2)


def list_units(transport: Transport, selection: UnitSelection) -> tuple[str, ...]:
    """The host's service units the selection names (templates/units.sh.j2: one bounded round trip)."""
    script = templates.render("units.sh.j2", patterns=selection.patterns)
    result = transport.run("bash -s", stdin=script, timeout=LIST_TIMEOUT_S)
    if "@@end" not in result.stdout:
        raise TransportError(transport.host, f"listing the units failed (exit {result.exited})")
    return select_units(selection, parse_unit_listing(result.stdout))


def selected_units(transport: Transport, selection: UnitSelection) -> tuple[str, ...]:
    """Exact names as given; a glob's matches read on the host (ConfigError when it matches none)."""
    if not selection.has_glob:
        return selection.patterns
    units = list_units(transport, selection)
    if not units:
        raise ConfigError(f"--unit {selection.text!r} matches no service unit", source=transport.host)
    return units


def unit_crash(transport: Transport, unit: str, smi_timeout: int) -> UnitCrash:
    """Whether ``unit``'s latest run crashed, read as `oom`'s gate reads it (no lock: a read)."""
    try:
        found, sources = read_unit(transport, unit, journal_lines=GATE_LINES, smi_timeout=smi_timeout)
        evidence = read_diagnosis_evidence(found, sources, smi_timeout=smi_timeout)
    except RemediateError as exc:
        return UnitCrash(unit, crashed=False, unreadable=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return UnitCrash(unit, crashed=has_crashed(evidence.diagnosis))


def each_unit(
    transport: Transport,
    options: RunOptions,
    one: OneUnit,
    *,
    label: str,
    crashed_only: bool = False,
    detect: bool = True,
    command: str = "oom",
    now: Callable[[], float] = time.time,
) -> HostResult:
    """``one`` for each unit the run covers: the host's one result when it is one unit (as always), else a
    result holding each unit's (``units``; fleet/jobs.py lists them, one row each). ``crashed_only`` (`oom`):
    of the units not named exactly, only those whose latest run crashed. ``detect`` False (`rollback`): no
    unit named and several found stays the one-line refusal it was."""
    selection = parse_unit_spec(options.unit) if options.unit else None
    if selection is not None and selection.is_single:
        return one(transport, options)
    if selection is None:
        first = one(transport, options)
        if not first.several_units or not detect:
            return first
        units, pick = first.several_units, crashed_only
    else:
        refused = new_result(label, now)
        with host_outcome(refused, now):
            transport.open()
            units = selected_units(transport, selection)
        if refused.error:
            return refused
        pick = crashed_only and selection.has_glob  # a glob means "the crashed ones" even when it matches one
    if pick:
        refused = new_result(label, now)
        with host_outcome(refused, now):
            evidence = tuple(unit_crash(transport, u, options.smi_timeout) for u in units)
            units = crashed_units(label, evidence, fix=command)
        if refused.error:
            refused.unit_states = {e.unit: e.state for e in evidence}
            return refused
    results = [_named(one(transport, replace(options, unit=unit)), unit) for unit in units]
    return bundle(label, results)


def _named(result: HostResult, unit: str) -> HostResult:
    """A unit's result names its unit even when it failed before reading it (the retry file needs the pair)."""
    result.unit = result.unit or unit
    return result


def bundle(label: str, results: list[HostResult]) -> HostResult:
    """The host's result over its units: the first failed unit's outcome and error (else the first's outcome),
    the worst exit code; the rollout counts the host once, and the fleet lists ``units``."""
    worst = next((r for r in results if not r.ok), results[0])
    return HostResult(
        host=label,
        outcome=worst.outcome,
        error=worst.error,
        exit_code=max(r.exit_code for r in results),
        started_at=min(r.started_at for r in results),
        finished_at=max(r.finished_at for r in results),
        units=results,
    )
