"""``observations.jsonl``, the calibration log: one JSON line per healthy start on this machine.

`oom` and `rollback` append to it when a host ends healthy; `plan` and `oom --auto` read it. It lives in
the state directory (``$REMEDIATE_STATE_DIR``, ``$XDG_STATE_HOME/remediate``…) unless
``$REMEDIATE_OBSERVATIONS`` names the file. Appends from parallel hosts are serialised by a lock and go out
as one ``write`` of one line each.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

from remediate.controller.state import state_dir
from remediate.core.budget.observation import Observation, parse_observations
from remediate.errors import ConfigError

ENV = "REMEDIATE_OBSERVATIONS"
FILENAME = "observations.jsonl"
_LOCK = threading.Lock()


def default_path(env: Mapping[str, str]) -> Path:
    """``$REMEDIATE_OBSERVATIONS``, else ``observations.jsonl`` in the state directory."""
    if env.get(ENV):
        return Path(env[ENV]).expanduser()
    return state_dir(env) / FILENAME


def log_path(path: str | None) -> Path:
    """The calibration log: the path given, else :func:`default_path` of this process's environment."""
    return Path(path).expanduser() if path else default_path(os.environ)


def read_observations(path: Path) -> tuple[Observation, ...]:
    """Every well-formed record; a missing file is none, an unreadable one is bad input."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise ConfigError(f"cannot read the observations file: {exc.strerror or exc}", source=str(path)) from None
    return tuple(parse_observations(text.splitlines()))


def append_observation(path: Path, observation: Observation) -> None:
    """Append one record (the directory is created private to the user). Raises OSError."""
    line = (observation.to_json() + "\n").encode("utf-8")
    with _LOCK:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
