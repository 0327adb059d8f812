"""The journal lines that explain a failure, picked for the user to read (the health wait and ``bench`` show them).

Not findings: a rough filter that puts out-of-memory lines first, then crash lines, then the tail. What each
line means is :mod:`remediate.core.diagnosis.parser`'s job.
"""

from __future__ import annotations

import re

from remediate.core.diagnosis.systemd import is_gave_up

# Out-of-memory texts: torch c10/cuda/CUDACachingAllocator.cpp ("CUDA out of memory. Tried to allocate …",
# "… reserved by PyTorch but unallocated"; Python's torch.OutOfMemoryError), sglang
# model_executor/pool_configurator.py ("Not enough memory. Please try to increase --mem-fraction-static."),
# model_executor/runner/decode_cuda_graph_runner.py ("Capture cuda graph failed: …"); "Prefill out of memory" and
# "Decode out of memory" are matched too (sglang 0.5.23 prints neither).
OOM_RE = re.compile(
    r"OutOfMemoryError|CUDA out of memory|out of memory|Not enough memory|"
    r"Prefill out of memory|Decode out of memory|Capture cuda graph failed|reserved by PyTorch but unallocated",
    re.IGNORECASE,
)
# Crash texts: sglang managers/scheduler.py ("Scheduler hit an exception: {traceback}", then SIGQUIT to the
# parent), Python's "Traceback", and systemd's "Main process exited" / "Failed with result" / start limit.
CRASH_RE = re.compile(
    r"hit an exception|Traceback|SIGQUIT|Main process exited|Failed with result|"
    r"start-limit|Start request repeated|RuntimeError|Exception",
)


def explain_crash(lines: list[str], limit: int = 12) -> list[str]:
    """Journal lines that explain a failure: OOM lines first, then crash lines, then the tail; systemd's
    start-limit line (it gave up restarting the unit) is kept even when more lines than ``limit`` explain it."""
    oom = [line for line in lines if OOM_RE.search(line)]
    crash = [line for line in lines if CRASH_RE.search(line) and line not in oom]
    picked: list[str] = []
    for line in oom + crash + lines[-5:]:
        if line not in picked:
            picked.append(line)
    kept = picked[:limit]
    gave_up = next((line for line in reversed(lines) if is_gave_up(line)), None)
    if gave_up is not None and gave_up not in kept and kept:
        kept[-1] = gave_up
    return kept
