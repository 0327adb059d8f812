"""``nvidia-smi`` for the simulated GPUs: the query forms a remediation tool uses, from the stand-in's board.

Memory per GPU = what live stand-in servers published (sglang/gpus.py) + knob ``neighbour`` processes.
Supported: ``--query-gpu=FIELDS`` and ``--query-compute-apps=FIELDS`` with ``--format=csv[,noheader][,nounits]``,
``-i/--id=N[,M]``, ``-L``, and a bare ``nvidia-smi`` summary table.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from . import gpus, knobs, memory

MIB = 1 << 20
GPU_NAME = "NVIDIA H20"  # a 96 GB card: torch sees 94.97 GiB of it
DRIVER_RESERVED_MIB = 616  # memory.total minus what torch calls the capacity (a real H200 shows the same gap)
UNATTRIBUTED_MIB = 9  # memory.used above the processes' sum while any process holds memory
_GPU_FIELDS = {
    "index": ("index", None),
    "name": ("name", None),
    "gpu_name": ("name", None),
    "uuid": ("uuid", None),
    "gpu_uuid": ("uuid", None),
    "pci.bus_id": ("pci.bus_id", None),
    "gpu_bus_id": ("pci.bus_id", None),
    "memory.total": ("memory.total [MiB]", "MiB"),
    "memory.used": ("memory.used [MiB]", "MiB"),
    "memory.free": ("memory.free [MiB]", "MiB"),
    "memory.reserved": ("memory.reserved [MiB]", "MiB"),
    "utilization.gpu": ("utilization.gpu [%]", "%"),
    "count": ("count", None),
    "driver_version": ("driver_version", None),
}
_APP_FIELDS = {
    "pid": ("pid", None),
    "process_name": ("process_name", None),
    "name": ("process_name", None),
    "used_memory": ("used_gpu_memory [MiB]", "MiB"),
    "used_gpu_memory": ("used_gpu_memory [MiB]", "MiB"),
    "gpu_uuid": ("gpu_uuid", None),
    "gpu_bus_id": ("gpu_bus_id", None),
    "gpu_name": ("gpu_name", None),
}


_uuid = gpus.uuid


def _bus(gpu: int) -> str:
    return f"00000000:{0x18 + 0x10 * gpu:02X}:00.0"


class Host:
    """The host's simulated GPUs at this moment."""

    def __init__(self, kn: dict[str, object]) -> None:
        profile = memory.PROFILES[str(kn["profile"])]
        self.count = int(kn.get("gpus") or profile.tp_size)  # type: ignore[call-overload]
        self.total_mib = int(profile.gpu_total_gib * 1024) + DRIVER_RESERVED_MIB
        self.apps: list[tuple[int, int, str, int]] = []  # (gpu, pid, name, bytes)
        for pid, name, used in gpus.read_board(gpus.state_dir(kn)):
            for g, b in enumerate(used[: self.count]):
                if b > 0:
                    self.apps.append((g, pid, name, b))
        for nb in gpus.neighbours(kn):
            for g in range(self.count):
                if nb.on(g) and nb.gib > 0:
                    self.apps.append((g, nb.pid, nb.name, int(nb.gib * (1 << 30))))
        self.apps.sort()

    def used_mib(self, gpu: int) -> int:
        apps = [b for g, _, _, b in self.apps if g == gpu]
        used = sum(b // MIB for b in apps) + (UNATTRIBUTED_MIB if apps else 0)
        return min(self.total_mib - DRIVER_RESERVED_MIB, used)

    def gpu_value(self, gpu: int, field: str) -> str:
        used = self.used_mib(gpu)
        values = {
            "index": str(gpu),
            "name": GPU_NAME,
            "uuid": _uuid(gpu),
            "pci.bus_id": _bus(gpu),
            "memory.total [MiB]": str(self.total_mib),
            "memory.used [MiB]": str(used),
            "memory.free [MiB]": str(self.total_mib - DRIVER_RESERVED_MIB - used),
            "memory.reserved [MiB]": str(DRIVER_RESERVED_MIB),
            "utilization.gpu [%]": "0",
            "count": str(self.count),
            "driver_version": "570.124.06",
        }
        return values[field]

    def app_value(self, app: tuple[int, int, str, int], field: str) -> str:
        gpu, pid, name, used = app
        values = {
            "pid": str(pid),
            "process_name": name,
            "used_gpu_memory [MiB]": str(used // MIB),
            "gpu_uuid": _uuid(gpu),
            "gpu_bus_id": _bus(gpu),
            "gpu_name": GPU_NAME,
        }
        return values[field]


def _csv(rows: list[list[str]], header: list[str], units: list[str | None], fmt: set[str]) -> str:
    out = []
    if "noheader" not in fmt:
        out.append(", ".join(header if "nounits" not in fmt else [h.split(" [")[0] for h in header]))
    for row in rows:
        cells = [v if u is None or "nounits" in fmt else f"{v} {u}" for v, u in zip(row, units, strict=True)]
        out.append(", ".join(cells))
    return "\n".join(out) + "\n" if out else ""


def _fields(spec: str, table: dict[str, tuple[str, str | None]]) -> list[tuple[str, str | None]] | str:
    chosen = []
    for raw in spec.split(","):
        name = raw.strip()
        if name not in table:
            return f'Field "{name}" is not a valid field to query.'
        chosen.append(table[name])
    return chosen


def _table(host: Host, ids: list[int]) -> str:
    bar = "+-----------------------------------------+------------------------+----------------------+"
    lines = [
        time.strftime("%a %b %e %H:%M:%S %Y") + "       ",
        "+-----------------------------------------------------------------------------------------+",
        "| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |",
        bar,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for g in ids:
        memory_usage = f"{host.used_mib(g)}MiB / {host.total_mib}MiB"
        lines += [
            f"| {g:>3}  {GPU_NAME:<31}On  |   {_bus(g)} Off |                    0 |",
            f"| N/A   38C    P0             92W /  500W | {memory_usage:>22} |      0%      Default |",
            "|                                         |                        |             Disabled |",
            bar,
        ]
    lines += [
        "",
        "+-----------------------------------------------------------------------------------------+",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
    ]
    rows = [a for a in host.apps if a[0] in ids]
    if not rows:
        lines.append("|  No running processes found                                                             |")
    for g, pid, name, used in rows:
        lines.append(f"| {g:>4}   N/A  N/A  {pid:>15}      C   {name[-33:]:<33} {used // MIB:>8}MiB |")
    lines.append("+-----------------------------------------------------------------------------------------+")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        if key in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id") and not eq:
            if i + 1 >= len(args):
                sys.stderr.write(f"Option {key} requires an argument.\n")
                return 2
            value = args[i + 1]
            i += 1
        elif key not in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id", "-L", "--list-gpus"):
            sys.stdout.write('Invalid combination of input arguments. Please run "nvidia-smi -h" for help.\n')
            return 2
        opts["-i" if key == "--id" else key] = value
        i += 1
    try:
        kn = knobs.load_knobs()
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"nvidia-smi stand-in: {exc}\n")
        return 9
    host = Host(kn)
    ids = list(range(host.count))
    if "-i" in opts:
        try:
            ids = [int(x) for x in opts["-i"].split(",")]
        except ValueError:
            ids = [-1]
        if any(g < 0 or g >= host.count for g in ids):
            sys.stdout.write("No devices were found\n")
            return 6
    if "-L" in opts or "--list-gpus" in opts:
        sys.stdout.write("".join(f"GPU {g}: {GPU_NAME} (UUID: {_uuid(g)})\n" for g in ids))
        return 0
    fmt = {p.strip() for p in opts.get("--format", "").split(",") if p.strip()}
    for key, table in (("--query-gpu", _GPU_FIELDS), ("--query-compute-apps", _APP_FIELDS)):
        if key not in opts:
            continue
        if "csv" not in fmt:
            sys.stdout.write('Invalid combination of input arguments. Please run "nvidia-smi -h" for help.\n')
            return 2
        fields = _fields(opts[key], table)
        if isinstance(fields, str):
            sys.stdout.write(fields + "\n")
            return 2
        if key == "--query-gpu":
            rows = [[host.gpu_value(g, f) for f, _ in fields] for g in ids]
        else:
            rows = [[host.app_value(a, f) for f, _ in fields] for a in host.apps if a[0] in ids]
        sys.stdout.write(_csv(rows, [f for f, _ in fields], [u for _, u in fields], fmt))
        return 0
    sys.stdout.write(_table(host, ids))
    return 0
