"""A host's result as a run goes: timed phases, live progress, and errors turned into the outcome."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from remediate.core.probe import ProbeResult, ServiceState, daemonless_note
from remediate.core.unitfile.edit import UnitSettings, UnitSources
from remediate.core.unitfile.engine import read_engine
from remediate.core.unitfile.report import env_values, flag_values
from remediate.core.unitfile.sources import config_notes
from remediate.errors import RemediateError, SeveralUnitsError, TransportError, UnhealthyError
from remediate.models import HostResult, Phase, ProgressFn


def new_result(host: str, now: Callable[[], float] = time.time) -> HostResult:
    """A host's result, its start time taken now."""
    return HostResult(host=host, started_at=now())


def record_unit(result: HostResult, found: ProbeResult, sources: UnitSources | None = None) -> ServiceState:
    """The unit that was read (name and fragment path) goes into the result, with what its ``--config`` YAML
    sets (``sources``: the unit as read); returns its state."""
    state = found.state
    assert state is not None, "read_unit() resolves the unit before anything is recorded"
    result.unit, result.unit_path = state.unit, state.fragment_path
    if found.daemonless and (note := daemonless_note(found.daemonless)) not in result.notes:
        result.notes.append(note)
    engine_note = read_engine(found, sources).note  # the loaded unit and the disk disagree: which one is read
    for note in [*(config_notes(sources) if sources is not None else ()), *([engine_note] if engine_note else [])]:
        if note not in result.notes:
            result.notes.append(note)
    return state


@contextmanager
def host_outcome(result: HostResult, now: Callable[[], float] = time.time) -> Iterator[None]:
    """A host's errors become its result — one failing host never aborts the others — and its end time
    is recorded. An outcome already set (``failed`` after a failed undo, say) is kept."""
    try:
        yield
    except RemediateError as exc:
        result.error = str(exc)
        result.exit_code = exc.exit_code
        if isinstance(exc, SeveralUnitsError):
            result.several_units = exc.units  # host/units.py runs each of them
        if isinstance(exc, UnhealthyError) and exc.journal:
            result.journal = exc.journal
        if result.outcome == "not_attempted":
            result.outcome = "unreachable" if isinstance(exc, TransportError) and exc.exit_code == 3 else "failed"
    finally:
        result.finished_at = now()


class Timer:
    """Times a host's phases into its result and reports each one (and the waits) as progress. ``sleep`` is
    how the run's waits pause (``time.sleep``; tests pass one that records the pauses instead)."""

    def __init__(
        self, result: HostResult, progress: ProgressFn | None, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.result = result
        self.progress = progress
        self.sleep = sleep

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

    def waiting(self, phase: str, elapsed: float, line: str) -> None:
        """A wait's progress line (health.wait_healthy's ``on_progress``): phase, elapsed, newest journal line."""
        if self.progress:
            self.progress(self.result.host, "waiting", f"{phase} · {elapsed:.0f}s · {line}")


def record_settings(result: HostResult, before: UnitSettings | None, after: UnitSettings | None) -> None:
    """The managed flags and environment before and after the change (unknown sides stay empty)."""
    if before is not None:
        result.flags_before, result.env_before = flag_values(before), env_values(before)
    if after is not None:
        result.flags_after, result.env_after = flag_values(after), env_values(after)


def must_refuse(result: HostResult, reason: str, *, force: bool, dry_run: bool) -> bool:
    """A refusal of the change (the evidence contradicts it): True when the run must stop; with ``force`` the
    reason is a warning and the run goes on, with ``dry_run`` a warning that a real run would refuse."""
    if force:
        result.warnings.append(f"--force: {reason}")
    elif dry_run:
        result.warnings.append(f"a real run refuses without --force: {reason}")
    return not (force or dry_run)
