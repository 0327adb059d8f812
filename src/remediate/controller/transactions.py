"""``transactions.jsonl`` in the state directory: one JSON line per transaction event.

A killed or non-TTY run still leaves a line here saying what it committed, and the host's journal says
the same (``logger -t remediate``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remediate.controller.state import TRANSACTIONS, ensure_dir, state_dir


def record_transaction(record: Mapping[str, Any]) -> Path:
    """Append one JSON line (already masked by the caller) to ``transactions.jsonl``; return its path."""
    path = ensure_dir(state_dir()) / TRANSACTIONS
    line = json.dumps(dict(record), ensure_ascii=False, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("utf-8", "surrogateescape"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
