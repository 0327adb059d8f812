"""``observations.jsonl``, the calibration log: one JSON line per healthy start on this machine.

`oom` and `rollback` append to it when a host ends healthy; `plan` and `oom --auto` read it. It lives in
the state directory (controller/state.py ``state_dir``, the one place it is resolved) unless
``$REMEDIATE_OBSERVATIONS`` names the file; its directory is the user's alone either way, and the file is
never followed as a link (controller/state.py). Each record is one whole line (``append_line``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from remediate.controller.state import append_line, ensure_dir, read_state_file, state_dir
from remediate.core.capacity.observation import Observation, parse_observations
from remediate.errors import ConfigError

ENV = "REMEDIATE_OBSERVATIONS"
FILENAME = "observations.jsonl"


def default_path(env: Mapping[str, str]) -> Path:
    """``$REMEDIATE_OBSERVATIONS``, else ``observations.jsonl`` in the state directory."""
    if env.get(ENV):
        return Path(env[ENV]).expanduser()
    return state_dir(env) / FILENAME


def log_path(path: str | None) -> Path:
    """The calibration log: the path given, else :func:`default_path` of this process's environment."""
    return Path(path).expanduser() if path else default_path(os.environ)


def read_observations(path: Path) -> tuple[Observation, ...]:
    """Every well-formed record; a missing file is none, an unreadable one (or a link) is bad input."""
    try:
        text = read_state_file(path)
    except OSError as exc:
        raise ConfigError(f"cannot read the observations file: {exc.strerror or exc}", source=str(path)) from None
    return () if text is None else tuple(parse_observations(text.splitlines()))


def append_observation(path: Path, observation: Observation) -> None:
    """Append one record (the directory created private to the user, and checked). ConfigError naming the
    file when it cannot be."""
    ensure_dir(path.parent)
    append_line(path, (observation.to_json() + "\n").encode("utf-8"))
