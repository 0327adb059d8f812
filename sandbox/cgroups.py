"""Cgroups of sandbox hosts on a machine whose PID 1 is not systemd, and the sweep of dead runs' leftovers.

With no systemd on the machine, ``systemd-nspawn --keep-unit`` puts its ``payload``/``supervisor`` cgroups
under the launcher's current cgroup, so each launcher first moves itself into one of its own, in every
hierarchy nspawn uses (``name=systemd`` and, on a hybrid machine, ``unified``):
``<hierarchy>/remediate-sandbox/<owner pid>.<owner start time>.<machine>``. The owner is the Python process
that started the host; when it is gone (killed, crashed), the next sandbox start kills every process left
in such a cgroup, by PID, and removes the directories. The processes' mount namespaces (the overlay) and
sockets die with them.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

BASE = Path("/sys/fs/cgroup")
GROUP = "remediate-sandbox"


def hierarchies() -> list[Path]:
    """The cgroup hierarchies a launcher must move into (cgroup v2 alone, or v1 name=systemd + unified)."""
    if (BASE / "cgroup.controllers").exists():
        return [BASE]
    found = [BASE / name for name in ("systemd", "unified") if (BASE / name / "cgroup.procs").exists()]
    return found


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_tag(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{pid}.{_start_time(pid)}"


def group_name(machine: str) -> str:
    return f"{owner_tag()}.{machine}"


def group_dirs(name: str) -> list[Path]:
    return [h / GROUP / name for h in hierarchies()]


def prepare(name: str) -> list[Path]:
    dirs = group_dirs(name)
    for path in dirs:
        path.mkdir(parents=True, exist_ok=True)
    return dirs


def pids(name: str) -> list[int]:
    """Every process in the host's cgroups (the launcher, nspawn, the container's whole tree)."""
    found: set[int] = set()
    for top in group_dirs(name):
        if not top.exists():
            continue
        for dirpath, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    found.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
                except OSError:
                    continue
    return sorted(found)


def kill_and_remove(name: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process of the host's cgroups by PID, wait, remove the directories; returns survivors."""
    deadline = time.monotonic() + timeout
    while True:
        left = pids(name)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            return left
        time.sleep(0.01)
    for top in group_dirs(name):
        _rmdir_tree(top, deadline)
    return []


def _rmdir_tree(top: Path, deadline: float) -> None:
    if not top.exists():
        return
    for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
        while True:
            try:
                os.rmdir(dirpath)
                break
            except FileNotFoundError:
                break
            except OSError:  # EBUSY while the last exited process is reaped
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)


def _owner_alive(tag: str) -> bool:
    pid, _, start = tag.partition(".")
    return pid.isdigit() and _start_time(int(pid)) == start


def sweep_dead() -> list[str]:
    """Kill and remove every sandbox cgroup whose owner process is gone; returns the names swept."""
    swept = []
    for top in hierarchies():
        group = top / GROUP
        if not group.is_dir():
            continue
        for entry in group.iterdir():
            parts = entry.name.split(".", 2)
            if len(parts) == 3 and not _owner_alive(f"{parts[0]}.{parts[1]}") and entry.name not in swept:
                kill_and_remove(entry.name)
                swept.append(entry.name)
    return swept
