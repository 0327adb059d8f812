"""``internal-errors.log`` in the state directory: the tracebacks of the bugs a rollout caught (masked by
the caller), so that they reach a log and not the terminal."""

from __future__ import annotations

import time
from collections.abc import Callable

from remediate.controller.state import append_line, ensure_dir, state_dir
from remediate.errors import ConfigError

INTERNAL_ERRORS = "internal-errors.log"


def append_traceback(host: str, text: str, clock: Callable[[], float] = time.time) -> str | None:
    """Append ``text`` under a header line to ``internal-errors.log``; its path, or None if it cannot be.
    The file is the user's alone (0600, an existing file's mode fixed too) and never followed as a symlink."""
    try:
        path = ensure_dir(state_dir()) / INTERNAL_ERRORS
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock()))
        entry = f"--- {stamp} {host}\n{text}"
        append_line(path, (entry if entry.endswith("\n") else entry + "\n").encode("utf-8", "replace"))
    except (ConfigError, OSError):
        return None
    return str(path)
