"""``nvidia-smi --query-*`` CSV (``noheader,nounits``: MiB) and ``ps -e -o pid=,ppid=``, taken apart, and
which GPU processes are not the server's: on the GPUs the server uses (a sibling instance of a template on
other GPUs is no neighbour)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from remediate.core.diagnosis.sizes import MIB
from remediate.models import JsonObject


@dataclass(frozen=True)
class Gpu:
    index: int
    total_bytes: int
    used_bytes: int
    uuid: str = ""  # "GPU-…"; "" where nvidia-smi did not say

    def to_dict(self) -> JsonObject:
        return {
            "index": self.index,
            "uuid": self.uuid or None,
            "total_bytes": self.total_bytes,
            "used_bytes": self.used_bytes,
        }


@dataclass(frozen=True)
class GpuApp:
    pid: int
    used_bytes: int
    gpu_uuid: str = ""  # the GPU this row is about; "" where nvidia-smi did not say

    def to_dict(self) -> JsonObject:
        return {"pid": self.pid, "used_bytes": self.used_bytes, "gpu_uuid": self.gpu_uuid or None}


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:  # "[N/A]", "[Not Supported]", an error message
        return None


def _uuid(text: str) -> str:
    """A GPU UUID as nvidia-smi prints it (``GPU-8f1c…``); "" for ``[N/A]`` or anything else."""
    return text if text.startswith("GPU-") and len(text) <= 64 else ""


def parse_gpus(lines: Iterable[str]) -> tuple[Gpu, ...]:
    """``--query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits`` (also the older
    ``index,memory.total,memory.used``: no UUIDs)."""
    out = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        uuid = _uuid(parts.pop(1)) if len(parts) == 4 else ""
        values = [_int(part) for part in parts]
        if len(values) == 3 and None not in values:
            index, total, used = (v or 0 for v in values)
            out.append(Gpu(index, total * MIB, used * MIB, uuid))
    return tuple(out)


def parse_apps(lines: Iterable[str]) -> tuple[GpuApp, ...]:
    """``--query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits`` (one line per process
    and GPU; also the older ``pid,used_memory``: no GPU)."""
    out = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        uuid = _uuid(parts.pop()) if len(parts) == 3 else ""
        values = [_int(part) for part in parts]
        if len(values) == 2 and None not in values:
            pid, used = (v or 0 for v in values)
            out.append(GpuApp(pid, used * MIB, uuid))
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


def visible_uuids(value: str | None, gpus: Iterable[Gpu]) -> frozenset[str] | None:
    """The GPUs a ``CUDA_VISIBLE_DEVICES`` value names, as UUIDs; None where it cannot tell (unset, a MIG
    instance, an index or UUID prefix no GPU has, GPUs read without UUIDs, nothing named).

    CUDA reads the comma-separated list up to its first invalid entry; an entry is an index or a UUID
    (prefix). An index is CUDA's enumeration order, which is nvidia-smi's on identical GPUs (the fleet's case:
    CUDA_DEVICE_ORDER=FASTEST_FIRST ties fall back to PCI bus order, nvidia-smi's)."""
    if value is None:
        return None
    by_index = {g.index: g.uuid for g in gpus if g.uuid}
    found: set[str] = set()
    for entry in (e.strip() for e in value.split(",")):
        if entry.isdigit():
            if int(entry) not in by_index:
                return None
            found.add(by_index[int(entry)])
        elif entry.startswith("GPU-"):
            matches = [u for u in by_index.values() if u.startswith(entry)]
            if len(matches) != 1:
                return None
            found.add(matches[0])
        else:
            break
    return frozenset(found) or None


def server_gpus(
    apps: Iterable[GpuApp], server: frozenset[int], visible: frozenset[str] | None
) -> frozenset[str] | None:
    """The GPUs the server uses: where its processes hold memory; else (crashed, or not yet on a GPU) the
    unit's ``CUDA_VISIBLE_DEVICES`` (``visible``); None: unknown, every GPU."""
    held = frozenset(a.gpu_uuid for a in apps if a.pid in server and a.gpu_uuid)
    return held or visible


def foreign_apps(
    apps: Iterable[GpuApp], server: frozenset[int], visible: frozenset[str] | None = None
) -> tuple[GpuApp, ...]:
    """GPU processes outside the server's process tree on a GPU the server uses (:func:`server_gpus`; a row
    without its GPU counts); empty when the tree is unknown."""
    if not server:
        return ()
    rows = tuple(apps)
    used = server_gpus(rows, server, visible)
    return tuple(a for a in rows if a.pid not in server and (used is None or not a.gpu_uuid or a.gpu_uuid in used))
