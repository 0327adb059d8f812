"""Local unit-file I/O for `remediate edit --write`: backup, then an atomic in-place replace."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from remediate.errors import ConfigError


def read_unit_file(path: Path) -> str:
    """A local unit file as text; a missing, unreadable or non-UTF-8 file is a ConfigError naming it."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("no such file", source=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a unit file", source=str(path)) from None
    except PermissionError:
        raise ConfigError("permission denied", source=str(path)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=str(path)) from None


def backup_name(path: Path, epoch: int, tag: str = "oom") -> Path:
    """``<file>.bak.<tag>.<epoch>``, with ``.1``, ``.2``… when that name is taken."""
    base = path.with_name(f"{path.name}.bak.{tag}.{epoch}")
    candidate, n = base, 1
    while candidate.exists():
        candidate = base.with_name(f"{base.name}.{n}")
        n += 1
    return candidate


def write_atomically(path: Path, text: str, *, backup_epoch: int | None) -> Path | None:
    """Back up (``cp -p`` semantics) then replace ``path`` by rename; the file is always old or new bytes."""
    st = path.stat()
    backup: Path | None = None
    if backup_epoch is not None:
        backup = backup_name(path, backup_epoch)
        data = path.read_bytes()
        with open(backup, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(backup, st.st_mode & 0o7777)
        os.chown(backup, st.st_uid, st.st_gid)
        os.utime(backup, ns=(st.st_atime_ns, st.st_mtime_ns))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fchmod(fh.fileno(), st.st_mode & 0o7777)
            os.fchown(fh.fileno(), st.st_uid, st.st_gid)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return backup
