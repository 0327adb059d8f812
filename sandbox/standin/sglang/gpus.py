"""The simulated GPUs of a host: what each stand-in server holds per GPU, and "neighbour" processes.

A server publishes its per-GPU usage in ``<gpu_state_dir>/<pid>.json`` (knob ``gpu_state_dir``, default
``/run/sglang-standin``) as it starts and serves; ``bin/nvidia-smi`` sums those files (skipping dead PIDs)
and the neighbours of knob ``neighbour``. Nothing here talks to a real GPU.

A server's rank r runs on the r-th GPU its ``CUDA_VISIBLE_DEVICES`` names (indices or ``GPU-…`` UUIDs, as
CUDA reads them: up to the first invalid entry), else on GPU r; its row on the board says which GPUs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_STATE_DIR = "/run/sglang-standin"
DEFAULT_NEIGHBOUR_PID = 4242
MAX_GPUS = 64


def uuid(gpu: int) -> str:
    """The simulated GPU's UUID, in nvidia-smi's form."""
    return f"GPU-5a7e0c1d-{gpu:04x}-4b2e-9f3a-00000000{gpu:04x}"


def rank_gpus(tp: int, visible: str | None = None) -> tuple[int, ...]:
    """The GPU each of ``tp`` ranks runs on: ``CUDA_VISIBLE_DEVICES`` (this process's where ``visible`` is
    None) in order, then the GPUs after the last one named where it names fewer; GPU r where unset."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if value is None:
        return tuple(range(tp))
    by_uuid = {uuid(g): g for g in range(MAX_GPUS)}
    named: list[int] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.isdigit() and int(entry) < MAX_GPUS:
            named.append(int(entry))
        elif entry in by_uuid:
            named.append(by_uuid[entry])
        else:
            break
    while len(named) < tp:
        named.append(max(named, default=-1) + 1)
    return tuple(named[:tp])


@dataclass(frozen=True)
class Neighbour:
    """Another process holding GPU memory (a notebook, a stuck job): ``gpus`` None means every GPU."""

    pid: int
    gib: float
    gpus: tuple[int, ...] | None = None
    name: str = "/usr/bin/python3"

    def on(self, gpu: int) -> bool:
        return self.gpus is None or gpu in self.gpus


def neighbours(knobs: Mapping[str, object]) -> list[Neighbour]:
    """Knob ``neighbour``: one object or a list of ``{"pid", "gib", "gpus", "name"}`` (pid defaults to 4242)."""
    raw = knobs.get("neighbour")
    if not raw:
        return []
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"knob neighbour: expected an object, got {item!r}")
        gpus = item.get("gpus")
        out.append(
            Neighbour(
                pid=int(item.get("pid", DEFAULT_NEIGHBOUR_PID)),
                gib=float(item.get("gib", 0.0)),
                gpus=None if gpus is None else tuple(int(g) for g in gpus),
                name=str(item.get("name", "/usr/bin/python3")),
            )
        )
    return out


def others_gib(nbs: Sequence[Neighbour], n_gpus: int) -> tuple[float, ...]:
    """GiB held by neighbours on each rank's GPU (:func:`rank_gpus`)."""
    return tuple(sum(n.gib for n in nbs if n.on(g)) for g in rank_gpus(n_gpus))


def others_on(nbs: Sequence[Neighbour], rank: int) -> list[tuple[int, int]]:
    """(pid, bytes) of the neighbours on one rank's GPU, as NVML lists them."""
    gpu = rank_gpus(rank + 1)[rank]
    return [(n.pid, int(n.gib * (1 << 30))) for n in nbs if n.on(gpu) and n.gib > 0]


def state_dir(knobs: Mapping[str, object]) -> str:
    return str(knobs.get("gpu_state_dir") or DEFAULT_STATE_DIR)


class Board:
    """This server's row on the host's GPU board (best effort: an unwritable directory publishes nothing)."""

    def __init__(self, directory: str, pid: int, name: str = "/usr/bin/python3") -> None:
        self.path = os.path.join(directory, f"{pid}.json")
        self.directory = directory
        self.pid = pid
        self.name = name

    def publish(self, used_gib: Sequence[float]) -> None:
        doc = {
            "pid": self.pid,
            "name": self.name,
            "used_bytes": [max(0, int(u * (1 << 30))) for u in used_gib],
            "gpus": list(rank_gpus(len(used_gib))),
        }
        tmp = f"{self.path}.tmp"
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(doc, fh)
            os.replace(tmp, self.path)
        except OSError:
            pass

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    """A live stand-in server: the PID exists and (where /proc says) still runs sglang or the vLLM stand-in (which
    publishes to the same board), not a reused PID."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
            return b"sglang" in cmdline or b"vllm" in cmdline
    except OSError:
        return True


def read_board(directory: str) -> list[tuple[int, str, list[int]]]:
    """(pid, name, used bytes per GPU: index = GPU) of every live stand-in server that published (a row without
    ``gpus``: rank r on GPU r)."""
    rows = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    for entry in names:
        if not entry.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, entry), encoding="utf-8") as fh:
                doc = json.load(fh)
            pid = int(doc["pid"])
            by_rank = [int(b) for b in doc["used_bytes"]]
            on = [int(g) for g in doc.get("gpus", range(len(by_rank)))]
            used = [0] * MAX_GPUS
            for gpu, b in zip(on, by_rank, strict=False):
                if 0 <= gpu < MAX_GPUS:
                    used[gpu] += b
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(pid):
            rows.append((pid, str(doc.get("name", "/usr/bin/python3")), used))
    return rows
