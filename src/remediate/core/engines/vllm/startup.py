"""PURE: the KV-cache numbers a vLLM server logs at startup (V1, and V0's block line).

V1: ``Available KV cache memory: %.2f GiB`` (vllm/v1/worker/gpu_worker.py ``Worker.determine_available_memory``),
``GPU KV cache size: %s tokens`` and ``Maximum concurrency for %s tokens per request: %.2fx`` (the numbers
``f"{n:,}"`` in 0.11; vllm/v1/core/kv_cache_utils.py ``get_kv_cache_config_from_groups``), ``init engine (profile,
create kv cache, warmup model) took %.2f seconds`` (vllm/v1/engine/core.py ``EngineCore._initialize_kv_caches``).
V0: ``# %s blocks: %d, # CPU blocks: %d`` (vllm/executor/executor_base.py ``initialize_cache``; "cuda" in
0.8.x, "GPU" before) and ``total_gpu_memory (%.2fGiB) x gpu_memory_utilization (%.2f) = %.2fGiB``
(vllm/worker/worker.py ``determine_num_available_blocks``). Each is matched at the start of a message, after the
prefixes: a logged request is never a startup line. A line of a later start replaces an earlier one's numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from remediate.core.engines.vllm.logline import vllm_message

_NUM = r"\d+(?:\.\d+)?"
_INT = r"\d{1,3}(?:,\d{3})+|\d+"
AVAILABLE_RE = re.compile(rf"Available KV cache memory: ({_NUM}) GiB\b")
TOKENS_RE = re.compile(rf"GPU KV cache size: ({_INT}) tokens\b")
CONCURRENCY_RE = re.compile(rf"Maximum concurrency for ({_INT}) tokens per request: ({_NUM})x")
INIT_RE = re.compile(rf"init engine \(profile, create kv cache, warmup model\) took ({_NUM}) seconds")
V0_BLOCKS_RE = re.compile(r"# (?:GPU|cuda|CUDA) blocks: (\d+), # CPU blocks: (\d+)")
V0_REQUESTED_RE = re.compile(
    rf"(?:the current vLLM instance can use )?total_gpu_memory \(({_NUM}) ?GiB\) x gpu_memory_utilization "
    rf"\(({_NUM})\) = ({_NUM}) ?GiB"
)
V0_KV_RE = re.compile(rf".*the rest of the memory reserved for KV Cache is ({_NUM}) ?GiB")
# vllm/v1/worker/gpu_worker.py Worker.determine_available_memory with kv_cache_memory_bytes: "reserved %.2fGiB"
# (0.11; 0.34: "reserved %s GiB") "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped
# memory profiling"
KV_BYTES_RE = re.compile(
    rf"Initial free memory {_NUM} ?GiB, reserved ({_NUM}) ?GiB memory for KV Cache as specified by "
    r"kv_cache_memory_bytes config and skipped memory profiling"
)
# The same lines for ``grep -E`` over the journal (any prefix in front).
STARTUP_LINES_ERE = (
    r"(Available KV cache memory: |GPU KV cache size: |Maximum concurrency for |init engine \(profile"
    r"|# (GPU|cuda|CUDA) blocks: |total_gpu_memory \(|reserved for KV Cache is "
    r"|memory for KV Cache as specified by kv_cache_memory_bytes"
    # the version line of each start (core/engines/version.py): its release's default utilization
    r"|vLLM (API )?server version |█  version [0-9])"
)


@dataclass(frozen=True)
class VllmStartup:
    """The last start's numbers (None: not logged). ``kv_tokens`` is the pool in tokens (V0: blocks only)."""

    available_kv_gib: float | None = None
    kv_tokens: int | None = None
    max_model_len: int | None = None  # from the concurrency line
    max_concurrency: float | None = None
    init_seconds: float | None = None
    gpu_blocks: int | None = None  # V0
    cpu_blocks: int | None = None  # V0
    total_gib: float | None = None  # V0's requested-memory line
    utilization: float | None = None  # V0's requested-memory line
    is_v0: bool = False
    kv_bytes_gib: float | None = None  # --kv-cache-memory-bytes: the size vLLM reserved, profiling skipped

    @property
    def is_complete(self) -> bool:
        """The pool is known: V1's memory and tokens, or V0's blocks."""
        return (self.available_kv_gib is not None and self.kv_tokens is not None) or self.gpu_blocks is not None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_vllm_startup(lines: Iterable[str]) -> VllmStartup:
    """The KV numbers of the last start in ``lines`` (raw journal or stderr lines); never raises."""
    found = VllmStartup()
    for raw in lines:
        for line in str(raw).splitlines():
            found = _one(found, vllm_message(line)[0])
    return found


def _one(found: VllmStartup, text: str) -> VllmStartup:
    if (match := AVAILABLE_RE.match(text)) is not None:
        return VllmStartup(available_kv_gib=float(match.group(1)))  # a new start: its numbers only
    if (match := KV_BYTES_RE.match(text)) is not None:
        return VllmStartup(kv_bytes_gib=float(match.group(1)))  # a new start, sized in bytes
    if (match := TOKENS_RE.match(text)) is not None:
        return replace(found, kv_tokens=_int(match.group(1)))
    if (match := CONCURRENCY_RE.match(text)) is not None:
        return replace(found, max_model_len=_int(match.group(1)), max_concurrency=float(match.group(2)))
    if (match := INIT_RE.match(text)) is not None:
        return replace(found, init_seconds=float(match.group(1)))
    if (match := V0_REQUESTED_RE.match(text)) is not None:
        return VllmStartup(total_gib=float(match.group(1)), utilization=float(match.group(2)), is_v0=True)
    if (match := V0_KV_RE.match(text)) is not None:
        return replace(found, available_kv_gib=float(match.group(1)), is_v0=True)
    if (match := V0_BLOCKS_RE.match(text)) is not None:
        return replace(found, gpu_blocks=int(match.group(1)), cpu_blocks=int(match.group(2)), is_v0=True)
    return found
