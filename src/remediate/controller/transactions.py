"""``transactions.jsonl`` in the state directory: one JSON line per transaction event.

A killed or non-TTY run still leaves a line here saying what it committed, and the host's journal says
the same (``logger -t remediate``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remediate.controller.state import TRANSACTIONS, append_line, ensure_dir, read_state_file, state_dir


def record_transaction(record: Mapping[str, Any]) -> Path:
    """Append one JSON line (already masked by the caller) to ``transactions.jsonl``, whole and fsynced, never
    through a link (controller/state.py); return its path. ConfigError naming the file when it cannot be."""
    path = ensure_dir(state_dir()) / TRANSACTIONS
    line = json.dumps(dict(record), ensure_ascii=False, sort_keys=True) + "\n"
    append_line(path, line.encode("utf-8", "surrogateescape"), sync=True)
    return path


def read_transactions(host: str, since: float) -> list[dict[str, Any]]:
    """The host's records in ``transactions.jsonl`` stamped at or after ``since`` (epoch seconds; the
    stamps have a one-second grain), oldest first; a line that does not parse is skipped."""
    text = read_state_file(state_dir() / TRANSACTIONS)
    if text is None:
        return []
    floor = datetime.fromtimestamp(int(since), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("host") == host and str(record.get("time", "")) >= floor:
            out.append(record)
    return out
