"""Where an inventory rollout's retry file goes and how it is written: the state directory's ``retry/``
(or ``--retry-dir``) as ``remediate-retry-<UTC>.yaml``, or ``--retry-file PATH``. What goes in it (the
hosts that failed, as an inventory) is the fleet's (``fleet/retry.py``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from remediate.controller.state import ensure_dir, state_dir
from remediate.errors import ConfigError

HEADER = "# remediate retry file: the hosts that failed or were not attempted. Use it with -i.\n"


def now_stamp(clock: Callable[[], float] = time.time) -> str:
    """UTC timestamp for file names: 20261129T071422Z."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))


def _target(directory: str | None, path: str | None, *, create: bool) -> Path:
    if path is not None:
        return Path(path).expanduser().resolve()
    folder = Path(directory) if directory is not None else state_dir() / "retry"
    return (ensure_dir(folder) if create else folder).resolve()


def check_retry_path(directory: str | None = None, *, path: str | None = None) -> None:
    """The retry file's directory can be created and written, and ``--retry-file PATH`` is a writable file or
    a new name in a writable directory. ConfigError naming the path otherwise."""
    target = _target(directory, path, create=True)
    folder = target.parent if path is not None else target
    if path is not None and target.is_dir():
        raise ConfigError("the retry file is a directory", source=str(target))
    if not folder.is_dir():
        raise ConfigError("the retry file's directory does not exist", source=str(folder))
    if not os.access(folder, os.W_OK | os.X_OK) or (
        path is not None and target.exists() and not os.access(target, os.W_OK)
    ):
        raise ConfigError("cannot write the retry file here (permissions)", source=str(target))


def write_retry_text(text: str, directory: str | None = None, *, path: str | None = None) -> str:
    """Write ``text`` (an inventory) under the header to ``path``, else to a new ``remediate-retry-<UTC>.yaml``
    in ``directory`` (default: the state directory's ``retry/``); its path. ConfigError when it cannot be."""
    target = _target(directory, path, create=True)
    if path is None:
        folder = target
        target = folder / f"remediate-retry-{now_stamp()}.yaml"
        n = 1
        while target.exists():
            target = folder / f"remediate-retry-{now_stamp()}-{n}.yaml"
            n += 1
    try:
        target.write_text(HEADER + text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the retry file: {exc.strerror}", source=str(target)) from None
    return str(target)
