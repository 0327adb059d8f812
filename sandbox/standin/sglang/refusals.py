"""Startup refusals of sglang 0.5.23 that no memory arithmetic explains: the allocator settings it rejects.

Both read ``PYTORCH_CUDA_ALLOC_CONF`` and ``PYTORCH_ALLOC_CONF`` field by field (``expandable_segments:True``,
case-insensitive value) and fail before serving, so the unit crash-loops at startup:

- Mooncake over EFA: disaggregation/mooncake/utils.py ``_validate_efa_allocator_compatibility``, called by
  ``MooncakeKVManager.__init__`` (disaggregation/mooncake/conn.py) in a prefill/decode scheduler with the
  mooncake transfer backend, when ``MOONCAKE_PROTOCOL`` (environ.py, default ``rdma``) is ``efa``: a ValueError
  in every rank's scheduler.
- the weight-cache daemon: weight_cache/daemon.py ``WeightCacheDaemon._assert_ipc_compatible_allocator``, run by
  ``WeightCacheDaemon.load`` in each daemon process the engine spawns for ``--weight-cache-mode daemon``
  (entrypoints/engine.py ``_launch_weight_cache_daemons``, ``spawn_weight_cache_daemon``): a RuntimeError.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from . import logs
from .traces import frame_lines

_SITE = "/opt/sglang/venv/lib/python3.12/site-packages/sglang"
_EFA_FRAMES = [
    ("srt/managers/scheduler.py", 2901, "run_scheduler_process", "scheduler = Scheduler("),
    ("srt/managers/scheduler.py", 355, "__init__", "self.init_disaggregation()"),
    ("srt/disaggregation/mooncake/conn.py", 272, "__init__", "_validate_efa_allocator_compatibility("),
    ("srt/disaggregation/mooncake/utils.py", 57, "_validate_efa_allocator_compatibility", "raise ValueError("),
]
_DAEMON_FRAMES = [
    ("srt/weight_cache/daemon.py", 654, "run_weight_cache_daemon", "daemon.load()"),
    ("srt/weight_cache/daemon.py", 268, "load", "self._assert_ipc_compatible_allocator()"),
    ("srt/weight_cache/daemon.py", 419, "_assert_ipc_compatible_allocator", "raise RuntimeError("),
]


def expandable_var(environ: Mapping[str, str]) -> str | None:
    """utils.py ``_cuda_expandable_segments_enabled``: the variable that turns expandable segments on."""
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        for field in environ.get(var, "").split(","):
            key, _, value = field.partition(":")
            if key.strip() == "expandable_segments" and value.strip().lower() == "true":
                return var
    return None


def efa_message(var: str) -> str:
    return (
        f"{var} enables expandable_segments, which is incompatible with MOONCAKE_PROTOCOL=efa because the current "
        "libfabric EFA provider cannot transfer CUDA VMM allocations. Disable expandable_segments."
    )


def daemon_message(var: str) -> str:
    return (
        f"[WeightCacheDaemon] {var} sets expandable_segments:True, which is incompatible with CUDA IPC weight "
        "sharing: the expandable-segments allocator hands out memory that cannot be exported via _share_cuda_, so "
        "the IPC handle export would fail mid-way. Unset expandable_segments for the weight cache daemon process "
        "(it can stay enabled for the engine itself)."
    )


def refusal(sa: dict, version: tuple[int, ...], environ: Mapping[str, str]) -> tuple[str, str] | None:
    """("efa" | "daemon", the exception's text) when this start is refused, else None (0.5.23 on)."""
    var = expandable_var(environ)
    if version < (0, 5, 23) or var is None:
        return None
    if sa.get("weight_cache_mode") == "daemon":  # the daemons start before the schedulers (Engine._launch_subprocesses)
        return "daemon", daemon_message(var)
    disaggregated = sa.get("disaggregation_mode") in ("prefill", "decode")
    mooncake = sa.get("disaggregation_transfer_backend", "mooncake") == "mooncake"
    if disaggregated and mooncake and environ.get("MOONCAKE_PROTOCOL", "rdma").lower() == "efa":
        return "efa", efa_message(var)
    return None


def die_refused(kind: str, text: str, tp: int) -> None:
    """Every rank's process fails with the refusal, the main process exits 1 (never returns)."""
    for r in range(tp):
        if kind == "daemon":  # a spawned multiprocessing process: its traceback goes out raw
            tb = ["Traceback (most recent call last):", *frame_lines(_SITE, _DAEMON_FRAMES), f"RuntimeError: {text}"]
            logs.main(f"[Daemon gpu={r} tp_rank={r}] ERROR weight cache daemon failed\n" + "\n".join(tb))
        else:
            tb = ["Traceback (most recent call last):", *frame_lines(_SITE, _EFA_FRAMES), f"ValueError: {text}"]
            logs.rank(r, "Scheduler hit an exception: " + "\n".join(tb))
    logs.main("Rank 0 scheduler is dead. Please check if there are relevant logs.")
    logs.main("Exit code: 1")
    logs.main("RuntimeError: Initialization failed. Please see the error messages above.")
    sys.stdout.flush()
    os._exit(1)
