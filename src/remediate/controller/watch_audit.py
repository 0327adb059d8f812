"""The watcher's audit log: ``watch-audit.jsonl`` in the state directory, append-only, one JSON object per
event (detected → diagnosed → decided → acted → outcome), secrets masked.

Each event is one whole line or none (controller/state.py ``append_line``: a full disk refuses the event in
one line naming the file, never two events glued on one line); a line that does not parse (a crash's cut
line, an edit) is skipped and counted by the reader, never a reason to stop reading."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remediate.controller.state import append_line, read_state_file
from remediate.core.unitfile.secrets import mask_secrets
from remediate.models import HostResult

AUDIT = "watch-audit.jsonl"


def masked(value: Any) -> Any:
    """Every string in a JSON-able value with its secrets masked (the JSON text itself stays valid)."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {str(k): masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [masked(v) for v in value]
    return value


def append_event(directory: Path, event: dict[str, Any]) -> None:
    """One whole line on an O_APPEND descriptor, never through a link; ConfigError naming the file when the
    event cannot be written (a full disk)."""
    line = json.dumps(masked(event), sort_keys=True, default=str) + "\n"
    append_line(directory / AUDIT, line.encode())


@dataclass(frozen=True)
class AuditRead:
    """The audit log's events, and how many of its lines were skipped (not a JSON object)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    path: str = ""


def read_audit(directory: Path) -> AuditRead:
    """Every event of the audit log, oldest first; a line that is not a JSON object is skipped and counted."""
    path = directory / AUDIT
    text = read_state_file(path)
    events: list[dict[str, Any]] = []
    skipped = 0
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict):
            events.append(event)
        else:
            skipped += 1
    return AuditRead(events, skipped, str(path))


def read_events(directory: Path) -> list[dict[str, Any]]:
    """The audit log's events (:func:`read_audit`, the lines that do not parse skipped)."""
    return read_audit(directory).events


def fix_change(result: HostResult) -> dict[str, Any]:
    """What a fix changed, for its outcome record: the flags before → after (fraction, chunk…), the allocator
    environment, the tokens, the backup (a result over several units lists each unit's)."""
    if result.units:
        return {"units": {str(u.unit): fix_change(u) for u in result.units}}
    return {
        "flags": {"before": result.flags_before, "after": result.flags_after},
        "env": {"before": result.env_before, "after": result.env_after},
        "tokens": result.max_total_num_tokens,
        "target_tokens": result.target_tokens,
        "backup": result.backup,
        "changed": result.changed,
    }
