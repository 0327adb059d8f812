"""`remediate edit`: the fix planned (and with ``write``, applied) on a local unit file."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from remediate.controller import localfile
from remediate.core.unitfile.edit import SourceFile, UnitEdit, UnitSources, plan_edit
from remediate.errors import ConfigError
from remediate.fleet.settings import (
    desired_state,
    parse_desired_args,
)


@dataclass
class EditResult:
    """`remediate edit`: the plan for a local unit file and, with ``write``, the backup taken."""

    path: Path
    plan: UnitEdit
    backup: Path | None = None

    @property
    def written(self) -> bool:
        return self.backup is not None


def edit_unit_file(
    unit_file: str | Path,
    *,
    mem_fraction_static: float | str | Decimal | None = None,
    mem_fraction_step: float | str | Decimal | None = None,
    chunked_prefill_size: int | str | None = None,
    alloc_conf: str | None = None,
    write: bool = False,
    now: datetime | None = None,
) -> EditResult:
    """Plan the OOM fix for a local unit file; with ``write``, back it up and replace it atomically.

    Only the given file is edited: a change that belongs in another file (an EnvironmentFile, a drop-in)
    is a ConfigError naming that file, and nothing is written."""
    path = Path(unit_file)
    try:
        asked = parse_desired_args(
            mem_fraction_static=mem_fraction_static,
            mem_fraction_step=mem_fraction_step,
            chunked_prefill_size=chunked_prefill_size,
            alloc_conf=alloc_conf,
        )
        desired = desired_state(asked)
    except ConfigError as exc:
        raise ConfigError(exc.message, source=str(path)) from None
    text = localfile.read_unit_file(path)
    sources = UnitSources(fragment=SourceFile(path=str(path), text=text), env_files=None)
    when = now or datetime.now(tz=UTC)
    plan = plan_edit(sources, desired, now=when)
    result = EditResult(path, plan)
    if write and plan.is_changed:
        for change in plan.files:
            if Path(change.path) != path:
                raise ConfigError(f"the change would touch {change.path}; edit that file", source=str(path))
        result.backup = localfile.write_atomically(
            path, plan.files[0].new_text, backup_epoch=int(when.timestamp()), expected=text
        )
    return result
