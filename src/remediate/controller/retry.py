"""Where an inventory rollout's retry file goes and how it is written: the state directory's ``retry/``
(or ``--retry-dir``) as ``remediate-retry-<UTC>.yaml``, or ``--retry-file PATH``. What goes in it (the
hosts that failed, as an inventory) is the fleet's (``fleet/retry.py``)."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

from remediate.controller.state import ensure_dir, state_dir, write_all
from remediate.errors import ConfigError

HEADER = "# remediate retry file: the hosts that failed or were not attempted. Use it with -i.\n"


def now_stamp(clock: Callable[[], float] = time.time) -> str:
    """UTC timestamp for file names: 20261129T071422Z."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))


def _target(directory: str | None, path: str | None, *, create: bool) -> Path:
    if path is not None:
        return Path(path).expanduser().absolute()  # never resolved: a link there is refused, not followed
    if directory is None:  # the state directory's retry/: the user's alone (controller/state.py)
        folder = state_dir() / "retry"
        if create:
            ensure_dir(folder.parent)
            ensure_dir(folder)
        return folder.resolve()
    folder = Path(directory)
    if create:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the retry directory: {exc.strerror}", source=str(folder)) from None
    return folder.resolve()


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
    # Never through a link: a new name is created O_EXCL (a name taken, a dangling link too, gets the next
    # number); --retry-file PATH is replaced in place when it is a regular file, refused when it is a link.
    base = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if path is None:
            folder, n = target, 0
            while True:
                target = folder / f"remediate-retry-{now_stamp()}{f'-{n}' if n else ''}.yaml"
                try:
                    fd = os.open(target, base | os.O_CREAT | os.O_EXCL, 0o600)
                    break
                except FileExistsError:
                    n += 1
        else:
            fd = os.open(target, base | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise ConfigError(f"cannot write the retry file: {why}", source=str(target)) from None
    try:
        write_all(fd, (HEADER + text).encode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot write the retry file: {exc.strerror}", source=str(target)) from None
    finally:
        os.close(fd)
    return str(target)
