"""Reset of a host's files: what changed in its overlay upper directory since boot goes back, through the mount.

Nothing writes to the upper directory behind the overlay's back: it is only read (to see what changed),
and every fix goes through ``/proc/<pid>/root`` — the host's own view, overlay included. A path that is
new since boot is removed (or, if the image has it, copied back from the image); a path the boot had
whose content changed or that vanished is copied back from the snapshot taken right after boot.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

# Parts of the upper directory that belong to the running system, not to a test: never restored.
SKIP = ("var/log", "var/lib/systemd", "var/lib/dbus", "var/cache", "var/lib/private", "etc/machine-id")


def _skipped(rel: str) -> bool:
    return any(rel == s or rel.startswith(s + "/") for s in SKIP)


def _entries(top: Path) -> dict[str, os.stat_result]:
    """relpath → lstat of everything under ``top`` (skipped parts left out)."""
    found: dict[str, os.stat_result] = {}
    for dirpath, dirs, files in os.walk(top):
        rel_dir = os.path.relpath(dirpath, top)
        rel_dir = "" if rel_dir == "." else rel_dir
        keep = []
        for name in dirs:
            rel = os.path.join(rel_dir, name)
            if not _skipped(rel):
                keep.append(name)
                found[rel] = os.lstat(os.path.join(dirpath, name))
        dirs[:] = keep
        for name in files:
            rel = os.path.join(rel_dir, name)
            if not _skipped(rel):
                found[rel] = os.lstat(os.path.join(dirpath, name))
    return found


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def snapshot(upper: Path, pristine: Path) -> None:
    """Copy the upper directory's regular files, links and directories (not whiteouts) to ``pristine``."""
    if pristine.exists():
        shutil.rmtree(pristine)
    pristine.mkdir(parents=True)
    for rel, st in sorted(_entries(upper).items()):
        src, dst = upper / rel, pristine / rel
        if stat.S_ISDIR(st.st_mode):
            dst.mkdir(exist_ok=True)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(src), dst)
        elif stat.S_ISREG(st.st_mode):
            shutil.copyfile(src, dst)
        else:
            continue
        _copy_meta(st, dst)


def _copy_meta(st: os.stat_result, dst: Path) -> None:
    os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(dst, stat.S_IMODE(st.st_mode))


def _same(a: Path, sa: os.stat_result, b: Path, sb: os.stat_result) -> bool:
    if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode) or sa.st_mode != sb.st_mode:
        return False
    if (sa.st_uid, sa.st_gid) != (sb.st_uid, sb.st_gid):
        return False
    if stat.S_ISLNK(sa.st_mode):
        return os.readlink(a) == os.readlink(b)
    if stat.S_ISREG(sa.st_mode):
        return sa.st_size == sb.st_size and a.read_bytes() == b.read_bytes()
    return True


def _remove(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _put(src: Path, st: os.stat_result, dst: Path) -> None:
    """Make ``dst`` (a path seen through the host's root) a copy of ``src``."""
    if stat.S_ISDIR(st.st_mode):
        if dst.is_symlink() or (dst.exists() and not dst.is_dir()):
            _remove(dst)
        dst.mkdir(parents=True, exist_ok=True)
    else:
        _remove(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copyfile(src, dst)
    _copy_meta(st, dst)


def restore(upper: Path, pristine: Path, image: Path, root: Path) -> list[str]:
    """Undo every change made since the snapshot; ``root`` is the host's root as seen from the machine."""
    now, then = _entries(upper), _entries(pristine)
    changed: list[str] = []
    removed: list[str] = []
    for rel in sorted(set(now) - set(then), key=len):  # new since boot: parents first
        if any(rel.startswith(r + "/") for r in removed):
            continue
        changed.append(rel)
        lower = image / rel
        if not os.path.lexists(lower):
            _remove(root / rel)
            removed.append(rel)
            continue
        st = os.lstat(lower)
        if stat.S_ISDIR(st.st_mode) and stat.S_ISDIR(now[rel].st_mode):
            continue  # a directory of the image copied up: its changed children are handled one by one
        if stat.S_ISDIR(st.st_mode):  # the image's directory was replaced or removed
            _remove(root / rel)
            shutil.copytree(lower, root / rel, symlinks=True)
            _copy_meta(st, root / rel)
            removed.append(rel)
        else:
            _put(lower, st, root / rel)
    for rel, st in sorted(then.items()):
        if rel in now and _same(upper / rel, now[rel], pristine / rel, st):
            continue
        changed.append(rel)
        _put(pristine / rel, st, root / rel)
    return changed
