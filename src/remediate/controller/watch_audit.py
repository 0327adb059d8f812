"""The watcher's audit log: ``watch-audit.jsonl`` in the state directory, append-only, one JSON object per
event (detected → diagnosed → decided → acted → outcome), secrets masked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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
    """One line, written with one write(2) on an O_APPEND descriptor (lines never interleave)."""
    line = json.dumps(masked(event), sort_keys=True, default=str) + "\n"
    fd = os.open(directory / AUDIT, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_events(directory: Path) -> list[dict[str, Any]]:
    path = directory / AUDIT
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
