"""Pure runtime memory rules: the prefill activation spike, fragmentation, and which rank's allocation fails."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .memory import GIB, MIB, MemoryPlan, Profile
from .oomtext import OOM


def prefill_chunk_tokens(new_tokens: int, chunked_prefill_size: int) -> int:
    """Tokens in the largest forward of a prefill: the whole prompt when chunking is off (<= 0)."""
    if chunked_prefill_size is None or chunked_prefill_size <= 0:
        return new_tokens
    return min(new_tokens, chunked_prefill_size)


def prefill_spike_bytes(profile: Profile, new_tokens: int, chunked_prefill_size: int) -> int:
    return profile.activation_bytes_per_token * prefill_chunk_tokens(new_tokens, chunked_prefill_size)


def fragmentation_after(profile: Profile, frag_gib: float, served_tokens: int, expandable: bool) -> float:
    """Reserved-but-unallocated memory after one more served request."""
    if expandable:
        return 0.0
    if served_tokens < 64:  # health checks and the warm-up leave no lasting fragmentation
        return frag_gib
    step = profile.frag_step_gib * min(1.0, served_tokens / profile.frag_full_tokens)
    return min(profile.frag_cap_gib, frag_gib + step)


def has_expandable_segments(alloc_conf: str | None) -> bool:
    """``PYTORCH_CUDA_ALLOC_CONF`` is a comma list of ``key:value``; torch accepts True/False."""
    for item in (alloc_conf or "").split(","):
        key, _, value = item.partition(":")
        if key.strip() == "expandable_segments":
            return value.strip() == "True"
    return False


def check_prefill(
    plan: MemoryPlan,
    profile: Profile,
    spike_bytes: int,
    frag_gib: float,
    *,
    rank: int | None = None,
    others: Sequence[tuple[int, int]] = (),
    taken_gib: float = 0.0,
    pid: int = 0,
) -> OOM | None:
    """torch needs a fresh block of ``spike_bytes``; fragmented reserved memory cannot serve it.

    ``rank`` None is the worst rank; ``others`` are (pid, bytes) of other processes on that GPU (for the text),
    ``taken_gib`` what they took since the server started (it comes out of this rank's headroom).
    """
    available = plan.available if rank is None else plan.rank_available(rank)
    free_bytes = max(0, int((available - frag_gib - taken_gib) * GIB))
    if spike_bytes <= free_bytes:
        return None
    total = int(round(plan.gpu_total * GIB))
    others_bytes = sum(b for _, b in others)
    return OOM(
        alloc_bytes=spike_bytes,
        total_bytes=total,
        free_bytes=free_bytes,
        process_bytes=max(0, total - free_bytes - others_bytes),
        allocated_bytes=int(plan.allocated_static * GIB),
        reserved_unallocated_bytes=int(frag_gib * GIB),
        private_pool_bytes=int(plan.graph * GIB),
        others=tuple(others),
        pid=pid,
    )


def graph_capture_oom(plan: MemoryPlan, profile: Profile, rank: int = 0, pid: int = 0) -> OOM:
    """The failing allocation of a CUDA graph capture: 448 MiB blocks until the next one does not fit."""
    block = 448 * MIB
    before = max(0, int((plan.before_graph + plan.rank_extra(rank)) * GIB))
    captured = before // block * block
    free_bytes = before - captured
    total = int(round(profile.gpu_total_gib * GIB))
    static = int((plan.free0 - plan.before_graph) * GIB)
    return OOM(
        alloc_bytes=block,
        total_bytes=total,
        free_bytes=free_bytes,
        process_bytes=total - free_bytes,
        allocated_bytes=static + captured,
        reserved_unallocated_bytes=int(0.02 * GIB),
        private_pool_bytes=captured,
        pid=pid,
    )


def max_safe_prompt(plan: MemoryPlan, profile: Profile, chunked_prefill_size: int, frag_gib: float) -> int:
    """Longest prompt (new tokens) that survives at this fragmentation, capped by max_req_input_len."""
    free_bytes = (plan.available - frag_gib) * GIB
    if free_bytes <= 0:
        return 0
    by_mem = math.floor(free_bytes / profile.activation_bytes_per_token)
    if chunked_prefill_size and chunked_prefill_size > 0 and by_mem >= chunked_prefill_size:
        return plan.max_req_input_len - 1
    return min(by_mem, plan.max_req_input_len - 1)
