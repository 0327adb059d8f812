"""The controller's state directory, resolved in one place for every file remediate keeps on this machine.

``$REMEDIATE_STATE_DIR``, else ``$XDG_STATE_HOME/remediate``, else ``~/.local/state/remediate`` (the XDG
base-directory default; a relative ``$XDG_STATE_HOME`` is ignored, as the specification says). Created
private (0700) on first use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from remediate.errors import ConfigError

ENV = "REMEDIATE_STATE_DIR"
TRANSACTIONS = "transactions.jsonl"


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where remediate keeps its controller-side state (not created here); ``env`` defaults to ``os.environ``."""
    env = os.environ if env is None else env
    explicit = env.get(ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_STATE_HOME")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else home / ".local" / "state"
    return base / "remediate"


def ensure_dir(path: Path) -> Path:
    """``path`` as a private directory (0700), created with its parents; ConfigError when it cannot be."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the state directory: {exc.strerror}", source=str(path)) from None
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
