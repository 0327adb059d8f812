"""Local unit-file I/O for `remediate edit --write`: safety checks, backup, then an atomic in-place replace."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

from remediate.errors import ConfigError, ConflictError, UnsafePathError


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
    while os.path.lexists(candidate):  # a dangling symlink takes the name too
        candidate = base.with_name(f"{base.name}.{n}")
        n += 1
    return candidate


def _refuse(directory: Path, why: str, source: Path) -> UnsafePathError:
    return UnsafePathError(
        f"{directory} {why}: chown root:root {directory} && chmod go-w {directory}, "
        "or move the file to a root-owned directory",
        source=str(source),
    )


def check_directory(directory: Path, source: Path) -> None:
    """Refuse a directory another user can change: it and every ancestor (as named and as resolved) must be
    owned by root (or by us) and not writable by group or others — OpenSSH's safe_path() (misc.c); an
    ancestor may be a sticky directory of root's (/tmp: no one renames another's entry, Linux fs/namei.c
    check_sticky()). In such directories no other user can swap a name we use for a symlink."""
    me = os.geteuid()
    for chain in (directory.absolute(), Path(os.path.realpath(directory))):
        for leaf, c in ((True, chain), *((False, a) for a in chain.parents)):
            try:
                st = os.stat(c)
            except OSError as exc:
                raise _refuse(c, f"cannot be checked ({exc.strerror})", source) from None
            if st.st_uid not in (0, me):
                raise _refuse(c, f"is owned by uid {st.st_uid}, not root", source)
            sticky_ok = not leaf and st.st_mode & stat.S_ISVTX and st.st_uid == 0
            if st.st_mode & 0o022 and not sticky_ok:
                raise _refuse(c, f"is writable by group or others (mode {st.st_mode & 0o7777:o})", source)


def check_hops(path: Path) -> None:
    """:func:`check_directory` for the directory of the file and of every symlink hop to its target."""
    hop, seen = path.absolute(), 0
    while True:
        check_directory(hop.parent, path)
        if not hop.is_symlink():
            return
        seen += 1
        if seen > 40:
            raise _refuse(hop.parent, f"holds a symlink loop at {hop}", path)
        hop = hop.parent / os.readlink(hop)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_unchanged(target: Path, expected: str | None, source: Path) -> bytes:
    """The target's bytes now (read without following a link); ConflictError when not what was read."""
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read()
    if expected is not None and _sha256(data) != _sha256(expected.encode("utf-8")):
        raise ConflictError(
            str(source),
            f"changed since it was read (sha256 {_sha256(data)[:12]}…, read {_sha256(expected.encode())[:12]}…): "
            "nothing written; run edit again",
        )
    return data


def _fill(fd: int, data: bytes, st: os.stat_result) -> None:
    """A new file's owner and mode (before any byte is in it), its bytes, its times; fsynced."""
    os.fchown(fd, st.st_uid, st.st_gid)  # before fchmod: a chown clears set-id bits
    os.fchmod(fd, st.st_mode & 0o7777)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.fsync(fd)


def _write_new(name: Path, data: bytes, st: os.stat_result) -> None:
    """Create ``name`` (O_EXCL, never through a link, mode 0600 whatever the umask: never wider than the
    final mode while it fills) and fill it; removed again when anything fails."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _fill(fd, data, st)
    except BaseException:
        name.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomically(path: Path, text: str, *, backup_epoch: int | None, expected: str | None = None) -> Path | None:
    """Back up (``cp -p`` semantics) then replace ``path`` by rename; the file is always old or new bytes.

    A symlinked ``path`` is written through, as the remote commit does (templates/commit.sh.j2): its target
    is replaced in its own directory and the link stays; the backup is beside the link. ``expected``: the
    text that was read; the file must still hold it (compare-and-swap) or nothing is written. As root,
    every directory involved must be root's alone (:func:`check_hops`)."""
    if os.geteuid() == 0:
        check_hops(path)
    target = Path(os.path.realpath(path))
    st = os.stat(target)
    data = _check_unchanged(target, expected, path)
    backup: Path | None = None
    if backup_epoch is not None:
        backup = backup_name(path, backup_epoch)
        _write_new(backup, data, st)
        _fsync_dir(backup.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)  # O_EXCL, mode 0600
    staged = Path(tmp)
    try:
        try:
            _fill(fd, text.encode("utf-8"), st)
        finally:
            os.close(fd)
        _check_unchanged(target, expected, path)  # the last moment before the rename
        os.replace(staged, target)
    except BaseException:
        staged.unlink(missing_ok=True)
        if backup is not None:
            backup.unlink(missing_ok=True)  # nothing written: not even the backup
        raise
    _fsync_dir(target.parent)
    return backup
