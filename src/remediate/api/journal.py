"""The API of `diagnose --journal` and `plan --journal`: a saved journal (a file, or ``-`` for stdin), read
bounded, and an optional local unit file for the settings; no host is contacted."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from remediate.models import HostResult

if TYPE_CHECKING:
    from remediate.core.unitfile.edit import UnitSettings, UnitSources
    from remediate.fleet.request import DiagnoseRequest, PlanRequest

__all__ = ["MAX_JOURNAL_BYTES", "check_journal_flags", "diagnose_journal", "plan_journal", "read_journal_file"]

MAX_JOURNAL_BYTES = 64 << 20
"""The largest saved journal read (transport's MAX_OUTPUT_BYTES: what a host's answer may be)."""


def check_journal_flags(
    journal: str | None,
    unit_file: str | None,
    targets: Sequence[str] = (),
    inventory: str | None = None,
    *,
    offline: bool = False,
) -> None:
    """--journal takes no host (nor `plan --offline`'s numbers); --unit-file needs --journal."""
    from remediate.errors import ConfigError

    if journal is None:
        if unit_file is not None:
            raise ConfigError("--unit-file is read only with --journal (a live host's unit is read from the host)")
        return
    if targets:
        raise ConfigError(f"--journal reads a saved journal, not a host: drop {' '.join(targets)}")
    if inventory is not None:
        raise ConfigError("--journal reads a saved journal, not a host: drop --inventory")
    if offline:
        raise ConfigError("--journal plans from a saved journal, --offline from numbers: give one of them")


def read_journal_file(path: str, stdin: BinaryIO | None = None) -> str:
    """The saved journal's text (``-``: stdin), at most :data:`MAX_JOURNAL_BYTES`; a missing, unreadable or
    larger file is a ConfigError naming it. Bytes that are not UTF-8 become U+FFFD (evidence, not input)."""
    from remediate.errors import ConfigError

    try:
        if path == "-":
            raw = (stdin or sys.stdin.buffer).read(MAX_JOURNAL_BYTES + 1)
        else:
            with Path(path).open("rb") as handle:
                raw = handle.read(MAX_JOURNAL_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("--journal: no such file", source=path) from None
    except IsADirectoryError:
        raise ConfigError("--journal: is a directory, not a saved journal", source=path) from None
    except PermissionError:
        raise ConfigError("--journal: permission denied", source=path) from None
    except OSError as exc:
        raise ConfigError(f"--journal: cannot read ({exc.strerror or exc})", source=path) from None
    if len(raw) > MAX_JOURNAL_BYTES:
        raise ConfigError(
            f"--journal: larger than {MAX_JOURNAL_BYTES >> 20} MiB; save fewer lines (journalctl -n, --since)",
            source=path,
        )
    return raw.decode("utf-8", errors="replace")


def _unit_settings(unit_file: str | None) -> UnitSettings | None:
    """The local unit file's effective settings (None without one); a file that cannot say is a ConfigError."""
    if unit_file is None:
        return None
    from remediate.controller.localfile import read_unit_file
    from remediate.core.unitfile.edit import SourceFile, UnitSources, read_settings
    from remediate.errors import ConfigError

    text = read_unit_file(Path(unit_file))
    try:
        return read_settings(UnitSources(fragment=SourceFile(path=unit_file, text=text), env_files=None))
    except ConfigError as exc:
        raise ConfigError(f"--unit-file: {exc.message}", source=unit_file) from None


def _plan_unit(unit_file: str | None) -> UnitSources | None:
    """`plan --journal`'s unit file as read (None without one): its engine plans the journal (a file that runs
    no engine readably is a ConfigError, as its settings say)."""
    if unit_file is None:
        return None
    from remediate.controller.localfile import read_unit_file
    from remediate.core.unitfile.edit import SourceFile, UnitSources
    from remediate.core.unitfile.engine import disk_engine

    sources = UnitSources(fragment=SourceFile(path=unit_file, text=read_unit_file(Path(unit_file))), env_files=None)
    if disk_engine(sources) is None:
        _unit_settings(unit_file)  # says why (a ConfigError naming the file)
    return sources


def diagnose_journal(request: DiagnoseRequest, *, stdin: BinaryIO | None = None) -> list[HostResult]:
    """`remediate diagnose --journal FILE`: the diagnosis of the saved journal ``request.journal``, as one result
    (``lines``: its last lines read, like the live ``--lines``; ``since``: a number of restarts only, a time
    needs a host)."""
    from remediate.core.journal import parse_saved_journal
    from remediate.core.units import single_unit
    from remediate.errors import ConfigError
    from remediate.host.diagnose.diagnose import DEFAULT_LINES, parse_since
    from remediate.host.diagnose.journal import diagnose_journal as diagnose_saved

    journal, unit_file, since = _journal_of(request), request.unit_file, request.since
    check_journal_flags(journal, unit_file, request.targets, request.inventory)
    unit = single_unit(request.unit, "diagnose --journal")  # a saved journal is one unit's: a glob is bad input
    count = DEFAULT_LINES if request.lines is None else request.lines
    restarts, since_time = parse_since(since, count)
    if since_time is not None:
        raise ConfigError(f"--since {since!r} with --journal: give a number of restarts (a time needs journalctl)")
    settings = _unit_settings(unit_file)
    saved = parse_saved_journal(read_journal_file(journal, stdin))
    label = "-" if journal == "-" else journal
    return [
        diagnose_saved(
            saved, label, unit=settings, unit_file=unit_file, lines=count, since_restarts=restarts, unit_name=unit
        )
    ]


def plan_journal(request: PlanRequest, *, stdin: BinaryIO | None = None) -> list[HostResult]:
    """`remediate plan --journal FILE`: the plan from the saved journal ``request.journal``'s startup and crash
    lines (no ``/server_info``); the calibration log is read as for a host (the journal's host name matches)."""
    from remediate.controller.observations import log_path, read_observations
    from remediate.core.journal import parse_saved_journal
    from remediate.core.units import single_unit
    from remediate.errors import ConfigError
    from remediate.host.common.options import BudgetOptions
    from remediate.host.diagnose.journal import plan_journal as plan_saved

    journal, unit_file, margin = _journal_of(request), request.unit_file, request.margin
    check_journal_flags(journal, unit_file, request.targets, request.inventory)
    unit = single_unit(request.unit, "plan --journal")
    if not 0 <= margin < 10:
        raise ConfigError(f"--margin {margin} must be between 0 and 10 (a share: 0.10 = 10%)")
    sources = _plan_unit(unit_file)
    budget = BudgetOptions(
        target_tokens=request.target_tokens,
        chunked_prefill_size=request.chunked_prefill_size,
        chunk_is_ceiling=request.chunked_prefill_size is None,
        margin=margin,
        observations=read_observations(log_path(request.observations)),
    )
    saved = parse_saved_journal(read_journal_file(journal, stdin))
    return [plan_saved(saved, journal, budget, unit=sources, unit_file=unit_file, unit_name=unit)]


def _journal_of(request: DiagnoseRequest | PlanRequest) -> str:
    from remediate.errors import ConfigError

    if request.journal is None:
        raise ConfigError("no saved journal named (--journal FILE)")
    return request.journal
