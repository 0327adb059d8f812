"""``nvidia-smi --query-*`` CSV (``noheader,nounits``: MiB) and ``ps -e -o pid=,ppid=``, taken apart."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from remediate.core.diagnosis.sizes import MIB


@dataclass(frozen=True)
class Gpu:
    index: int
    total_bytes: int
    used_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {"index": self.index, "total_bytes": self.total_bytes, "used_bytes": self.used_bytes}


@dataclass(frozen=True)
class GpuApp:
    pid: int
    used_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {"pid": self.pid, "used_bytes": self.used_bytes}


def _ints(line: str) -> list[int] | None:
    try:
        return [int(part.strip()) for part in line.split(",")]
    except ValueError:  # "[N/A]", "[Not Supported]", an error message
        return None


def parse_gpus(lines: Iterable[str]) -> tuple[Gpu, ...]:
    """``--query-gpu=index,memory.total,memory.used --format=csv,noheader,nounits``."""
    out = []
    for line in lines:
        values = _ints(line)
        if values and len(values) == 3:
            out.append(Gpu(values[0], values[1] * MIB, values[2] * MIB))
    return tuple(out)


def parse_apps(lines: Iterable[str]) -> tuple[GpuApp, ...]:
    """``--query-compute-apps=pid,used_memory --format=csv,noheader,nounits`` (one line per process and GPU)."""
    out = []
    for line in lines:
        values = _ints(line)
        if values and len(values) == 2:
            out.append(GpuApp(values[0], values[1] * MIB))
    return tuple(out)


def process_tree(ps_lines: Iterable[str], root: int) -> frozenset[int]:
    """``root`` and its descendants, from ``ps -e -o pid=,ppid=``."""
    children: dict[int, list[int]] = {}
    for line in ps_lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
    if root <= 0:
        return frozenset()
    seen = {root}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return frozenset(seen)


def foreign_apps(apps: Iterable[GpuApp], server: frozenset[int]) -> tuple[GpuApp, ...]:
    """GPU processes outside the server's process tree (empty when the tree is unknown)."""
    if not server:
        return ()
    return tuple(a for a in apps if a.pid not in server)
