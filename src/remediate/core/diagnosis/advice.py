"""The advisor's input (the unit's settings) and output (a recommendation), and small shared helpers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from remediate.core.diagnosis.findings import Finding, RunFacts
from remediate.core.diagnosis.torch_oom import GpuProcess

CHUNK = 4096
STEP = 0.01
MIN_FRACTION = 0.5  # below this a runtime OOM is not a fraction problem: say so instead of going lower
SHARE = 0.10  # reserved-but-unallocated counts when it is at least this share of the shortfall


@dataclass(frozen=True)
class AdvisorInput:
    """What the unit runs today (None = not known / flag absent)."""

    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None  # -1 or 0: chunking off
    alloc_conf: str | None = None
    max_total_num_tokens: int | None = None
    total_gpu_bytes: int | None = None
    free_before_weights_bytes: int | None = None
    free_after_weights_bytes: int | None = None
    max_running_requests: int | None = None
    cuda_graph_max_bs: int | None = None
    graph_flag: str | None = None  # the decode graph's batch flag as the unit writes it (its version's spelling)
    # the decode graph's batch flag the release the host runs accepts (core/engines/sglang/flags.py
    # graph_batch_flag; None: the release was not read)
    release_graph_flag: str | None = None
    server_pids: tuple[int, ...] = ()
    # (pid, bytes) of GPU processes outside the server's process tree (nvidia-smi), when that tree is known
    neighbour_processes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Recommendation:
    """The knobs to set (None = leave as is), why, and whether the evidence contradicts the OOM recipe."""

    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    alloc_conf: str | None = None
    other_flags: dict[str, int | str] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    blocking: bool = False
    kind: str | None = None  # the finding it answers
    command: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "mem_fraction_static": self.mem_fraction_static,
            "chunked_prefill_size": self.chunked_prefill_size,
            "alloc_conf": self.alloc_conf,
            "other_flags": dict(self.other_flags),
            "reasons": list(self.reasons),
            "blocking": self.blocking,
            "command": self.command,
        }


def resolved(settings: AdvisorInput, facts: RunFacts) -> AdvisorInput:
    """The unit's settings, gaps filled from what the failing run logged."""
    return replace(
        settings,
        mem_fraction_static=settings.mem_fraction_static
        if settings.mem_fraction_static is not None
        else facts.mem_fraction_static,
        chunked_prefill_size=settings.chunked_prefill_size
        if settings.chunked_prefill_size is not None
        else facts.chunked_prefill_size,
        max_total_num_tokens=settings.max_total_num_tokens or facts.max_total_num_tokens,
        free_before_weights_bytes=settings.free_before_weights_bytes or facts.free_before_weights_bytes,
        free_after_weights_bytes=settings.free_after_weights_bytes or facts.free_after_weights_bytes,
        max_running_requests=settings.max_running_requests or facts.max_running_requests,
        cuda_graph_max_bs=settings.cuda_graph_max_bs or facts.cuda_graph_max_bs,
    )


def step_up(value: float) -> float:
    """The first 0.01 step strictly above ``value``."""
    return (math.floor(value * 100 + 1e-9) + 1) / 100


def fmt_fraction(value: float) -> str:
    """0.9 → "0.90", 0.812 → "0.812" (at most four decimals, at least two)."""
    whole, _, frac = f"{value:.4f}".partition(".")
    return f"{whole}.{frac.rstrip('0').ljust(2, '0')}"


def neighbours(finding: Finding, server_pids: tuple[int, ...] = ()) -> tuple[GpuProcess, ...]:
    """Other processes on the crashing GPU; a lone "Process N" holding all of PyTorch's memory is the server
    itself seen through a PID namespace (containers: NVML reports host PIDs)."""
    others = [p for p in finding.neighbours if p.pid not in server_pids]
    has_self = any(p.self for p in finding.processes)
    if not has_self and len(others) == 1:
        torch_bytes = (finding.allocated_bytes or 0) + (finding.reserved_unallocated_bytes or 0)
        if torch_bytes and others[0].bytes >= torch_bytes:
            return ()
    return tuple(others)


def tokens_at(s: AdvisorInput, fraction: float) -> int | None:
    """KV tokens at another fraction: the pool is ``free1 − free0·(1 − mfs)``, same token size (sglang
    mem_cache/kv_cache_configurator.py ``_profile_available_bytes``)."""
    free0, free1, tokens, cur = (
        s.free_before_weights_bytes,
        s.free_after_weights_bytes,
        s.max_total_num_tokens,
        s.mem_fraction_static,
    )
    if not free0 or not free1 or not tokens or cur is None:
        return None
    pool = free1 - free0 * (1 - cur)
    if pool <= 0:
        return None
    return max(0, int((free1 - free0 * (1 - fraction)) * tokens / pool))
