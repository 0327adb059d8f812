"""torch's CUDA OOM text (c10 CUDACachingAllocator) in every format since 2.0, taken apart into bytes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from remediate.core.diagnosis.sizes import SIZE, parse_size

OOM_MARK = re.compile(r"CUDA out of memory\.?", re.IGNORECASE)
_TRIED = re.compile(rf"Tried to allocate ({SIZE})")
# torch ≥ 2.1: "GPU 0 has a total capacity of 94.97 GiB of which 893.00 MiB is free." (2.1: "capacty")
_NEW = re.compile(rf"GPU (\d+) has a total (capacity|capacty) of ({SIZE}) of which ({SIZE}) is free")
_SELF = re.compile(rf"Including non-PyTorch memory, this process has ({SIZE}) memory in use")
_OTHER = re.compile(rf"Process (\d+) has ({SIZE}) memory in use")
_ALLOWED = re.compile(rf"({SIZE}) allowed;")
_ALLOCATED = re.compile(rf"Of the allocated memory ({SIZE}) is allocated by PyTorch")
_PRIVATE = re.compile(rf"with ({SIZE}) allocated in private pools")
_UNALLOCATED = re.compile(rf"and ({SIZE}) is reserved by PyTorch but unallocated")
# torch ≤ 2.0: "(GPU 0; 23.54 GiB total capacity; 11.75 GiB already allocated; 572.50 MiB free;
#               [X allowed; ]12.40 GiB reserved in total by PyTorch)"
_OLD = re.compile(
    rf"\(GPU (\d+); ({SIZE}) total capacity; ({SIZE}) already allocated; ({SIZE}) free;"
    rf"(?: ({SIZE}) allowed;)?(?: ({SIZE}) reserved in total by PyTorch)?"
)
_OLD_GPU = re.compile(r"\(GPU (\d+);")


@dataclass(frozen=True)
class GpuProcess:
    """One NVML process line of torch's OOM text (``self``: "this process", i.e. the crashing one)."""

    pid: int | None
    bytes: int
    self: bool

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "bytes": self.bytes, "self": self.self}


@dataclass(frozen=True)
class TorchOOM:
    """The numbers of one torch OOM message (bytes; None where the text did not say)."""

    torch_format: str
    gpu: int | None = None
    tried_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None
    private_pools_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    reserved_bytes: int | None = None
    allowed_bytes: int | None = None
    processes: tuple[GpuProcess, ...] = ()


def _size(match: re.Match[str] | None, group: int = 1) -> int | None:
    if match is None or match.group(group) is None:
        return None
    return parse_size(match.group(group))


def parse_torch_oom(text: str) -> TorchOOM | None:
    """The numbers in ``text`` if it carries torch's CUDA OOM message, else None. Cut texts give what they hold.
    The journal parser passes the text from where the message starts (``logline.at_message``), never a line's
    middle: the numbers are read after torch's mark only."""
    mark = OOM_MARK.search(text)
    if mark is None:
        return None
    body = text[mark.start() :]
    old = _OLD.search(body)
    if old is not None or _OLD_GPU.search(body):
        return _parse_old(body, old)
    new = _NEW.search(body)
    if "capacty" in body:
        fmt = "2.1"
    elif "docs.pytorch.org" in body:
        fmt = "new"
    elif new is not None or "is free" in body:
        fmt = "2.2+"
    else:
        fmt = "unknown"
    processes = [GpuProcess(pid=None, bytes=parse_size(m.group(1)) or 0, self=True) for m in _SELF.finditer(body)]
    processes += [
        GpuProcess(pid=int(m.group(1)), bytes=parse_size(m.group(2)) or 0, self=False) for m in _OTHER.finditer(body)
    ]
    return TorchOOM(
        torch_format=fmt,
        gpu=int(new.group(1)) if new else None,
        tried_bytes=_size(_TRIED.search(body)),
        total_bytes=_size(new, 3),
        free_bytes=_size(new, 4),
        allocated_bytes=_size(_ALLOCATED.search(body)),
        private_pools_bytes=_size(_PRIVATE.search(body)),
        reserved_unallocated_bytes=_size(_UNALLOCATED.search(body)),
        allowed_bytes=_size(_ALLOWED.search(body)),
        processes=tuple(sorted(processes, key=lambda p: (not p.self, p.pid or 0))),
    )


def _parse_old(body: str, old: re.Match[str] | None) -> TorchOOM:
    if old is None:
        gpu = _OLD_GPU.search(body)
        return TorchOOM(
            torch_format="old", gpu=int(gpu.group(1)) if gpu else None, tried_bytes=_size(_TRIED.search(body))
        )
    allocated = _size(old, 3)
    reserved = _size(old, 6)
    unallocated = reserved - allocated if reserved is not None and allocated is not None else None
    return TorchOOM(
        torch_format="old",
        gpu=int(old.group(1)),
        tried_bytes=_size(_TRIED.search(body)),
        total_bytes=_size(old, 2),
        free_bytes=_size(old, 4),
        allocated_bytes=allocated,
        reserved_bytes=reserved,
        reserved_unallocated_bytes=max(0, unallocated) if unallocated is not None else None,
        allowed_bytes=_size(old, 5),
    )
