"""The controller's state directory: retry files and the record of every transaction.

``$REMEDIATE_STATE_DIR``, else ``$XDG_STATE_HOME/remediate``, else ``~/.local/state/remediate`` (the XDG
base-directory default). Created private (0700) on first use. A killed or non-TTY run still leaves a
line here saying what it committed, and the host's journal says the same (``logger -t remediate``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remediate.errors import ConfigError

TRANSACTIONS = "transactions.jsonl"


def state_dir() -> Path:
    """Where remediate keeps its controller-side state (not created here)."""
    explicit = os.environ.get("REMEDIATE_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "remediate"


def ensure_dir(path: Path) -> Path:
    """``path`` as a private directory (0700), created with its parents; ConfigError when it cannot be."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the state directory: {exc.strerror}", source=str(path)) from None
    return path


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


def check_state_dir() -> Path:
    """Before any host is touched: the state directory exists (created 0700) and root can write it, and so its
    transaction record; ConfigError naming the path otherwise."""
    path = ensure_dir(state_dir())
    record = path / TRANSACTIONS
    for target in (path, record):
        if target.exists() and not os.access(target, os.W_OK | (os.X_OK if target.is_dir() else 0)):
            raise ConfigError("cannot write here (permissions): fix it or set REMEDIATE_STATE_DIR", source=str(target))
    if not path.is_dir():
        raise ConfigError("not a directory: fix it or set REMEDIATE_STATE_DIR", source=str(path))
    return path
