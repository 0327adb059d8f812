"""The running server's environment: what the allocator really got, read from the host as root.

sglang reads ``PYTORCH_CUDA_ALLOC_CONF`` (torch ≥ 2.9: ``PYTORCH_ALLOC_CONF`` first) from its own
process environment, so the proof that an edit reached the allocator is ``/proc/<pid>/environ`` of the
sglang process: the unit's ``MainPID`` or, under a wrapper that does not ``exec`` (``bash -c``, ``numactl``),
the nearest descendant whose command line runs sglang (proc(5): ``/proc/PID/task/TID/children``). Where no
environ can be read, ``systemctl show -p Environment`` is what systemd parsed from the unit — which is where a
split ``Environment=`` line loses its assignments (systemd.exec(5): an invalid assignment is ignored).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from remediate.core.unitfile.alloc import ALLOC, ALLOC_NEW
from remediate.host.common import templates
from remediate.transport.base import Transport

_ENVIRON_MAX = 1 << 20  # bytes read from /proc/PID/environ (the kernel's ARG_MAX-bound env is far smaller)
_PIDS_MAX = 256  # processes looked at under MainPID
_TIMEOUT_S = 30.0
_NAMES = (ALLOC, ALLOC_NEW)
_ENTRY = "sglang[.]launch_server|(.*/)?sglang"  # one argv word: `-m sglang.launch_server`, the `sglang` script


@dataclass(frozen=True)
class ServerEnv:
    """The allocator variables of the running server (absent name: unset) and where they were read."""

    pid: int
    source: str  # "/proc/<pid>/environ" or "systemctl show -p Environment"
    values: dict[str, str]


def environ_args(entry: str = _ENTRY) -> dict[str, object]:
    """The bounds and patterns of the read (``templates/_environ.sh.j2``), for every script that includes it;
    ``entry``: the engine's argv word of its server process (its Engine's ``process_entry``)."""
    return {
        "pids_max": _PIDS_MAX,
        "entry": entry,
        "environ_max": _ENVIRON_MAX,
        "names": "^(" + "|".join(_NAMES) + ")=",
    }


def environ_script(unit: str, entry: str = _ENTRY) -> str:
    """The read (``templates/environ.sh.j2``): MainPID, the nearest process under it that runs the server, its
    allocator variables (``@@none`` where no process there runs it as its own argv: nothing is checked rather
    than the wrong process)."""
    return templates.render("environ.sh.j2", unit=unit, **environ_args(entry))


def parse_environ(stdout: str) -> ServerEnv | None:
    """The script's output → ServerEnv (None: no main process, or the read did not finish)."""
    if "@@end" not in stdout:
        return None
    head, _, body = stdout.partition("\n@@")
    kind, _, rest = body.partition("\n")
    word, _, pid_text = kind.partition(" ")
    if not pid_text.isdigit():
        return None
    text = rest.rsplit("@@end", 1)[0]
    values: dict[str, str] = {}
    if word == "environ":
        last: str | None = None
        for line in text.splitlines():
            name, eq, value = line.partition("=")
            if eq and name in _NAMES:
                values[name], last = value, name
            elif last is not None:  # a value holding a newline
                values[last] += "\n" + line
        return ServerEnv(int(pid_text), f"/proc/{pid_text}/environ", values)
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    for item in words:
        name, eq, value = item.partition("=")
        if eq and name in _NAMES:
            values[name] = value
    return ServerEnv(int(pid_text), "systemctl show -p Environment", values)


def read_server_env(transport: Transport, unit: str, entry: str = _ENTRY) -> ServerEnv | None:
    """The running server's allocator variables (None: no main process, or nothing readable); ``entry``: the
    engine's argv word (its Engine's ``process_entry``; sglang's by default)."""
    result = transport.run("bash -s", stdin=environ_script(unit, entry), timeout=_TIMEOUT_S)
    return parse_environ(result.stdout)
