"""PURE: vLLM's KV pool at another ``--gpu-memory-utilization``, from the numbers one start logged.

vllm/v1/worker/gpu_worker.py: ``requested_memory = total × gpu_memory_utilization`` (``Worker.init_device``)
and ``available_kv_cache_memory = requested_memory − non_kv_cache_memory`` (``determine_available_memory``),
where non-KV (weights + the profile run's torch peak + non-torch memory) does not depend on the utilization.
So the pool moves one for one with ``Δutilization × total``; ``freed_gib`` is what a smaller profile peak
gives back (a lower ``--max-num-batched-tokens``), when the caller knows it. Tokens are whole blocks
(vllm/v1/core/kv_cache_utils.py ``get_num_blocks``: bytes // page size // layers; tokens = blocks × block
size), the bytes per token measured from the logged pair (available GiB, tokens). vLLM refuses to start when
one request of ``max_model_len`` does not fit (``check_enough_kv_cache_memory``), so the lowest utilization
that still starts is part of the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# "Available KV cache memory: %.2f GiB": the logged figure is within half a hundredth of a GiB.
LOGGED_GIB_ERROR = 0.005


@dataclass(frozen=True)
class VllmSizing:
    """One start's logged pool (``available_gib``, ``tokens``) at ``utilization`` of a ``total_gib`` GPU."""

    total_gib: float
    utilization: float
    available_gib: float
    tokens: int
    block_size: int = 16

    @property
    def gib_per_token(self) -> float:
        return self.available_gib / self.tokens if self.tokens > 0 else 0.0

    def available_at(self, utilization: float, freed_gib: float = 0.0) -> float:
        """The KV memory (GiB) vLLM would find at ``utilization`` (may be ≤ 0: it would not start)."""
        return self.available_gib + (utilization - self.utilization) * self.total_gib + freed_gib

    def tokens_at(self, utilization: float, freed_gib: float = 0.0) -> int:
        """The pool in tokens at ``utilization``: whole blocks, 0 when no memory is left."""
        per_token = self.gib_per_token
        available = self.available_at(utilization, freed_gib)
        if per_token <= 0 or available <= 0:
            return 0
        count = available / per_token / self.block_size + 1e-9
        return math.floor(count) * self.block_size if math.isfinite(count) else 0

    def lowest_utilization(self, max_model_len: int, freed_gib: float = 0.0) -> float | None:
        """The lowest utilization (in hundredths, rounded up, with the log's rounding as margin) at which one
        request of ``max_model_len`` still fits the pool; None when even 1.0 is not enough."""
        if max_model_len <= 0 or self.total_gib <= 0 or self.tokens <= 0:
            return None
        needed_tokens = math.ceil(max_model_len / self.block_size) * self.block_size
        needed_gib = needed_tokens * self.gib_per_token + LOGGED_GIB_ERROR
        raw = self.utilization + (needed_gib - self.available_gib - freed_gib) / self.total_gib
        if not math.isfinite(raw) or raw > 1.0:
            return None
        return max(math.ceil(round(raw * 100, 6)) / 100, 0.01) if raw > 0 else 0.01
