"""PURE: a vLLM failure's verdict turned into the recommendation ``diagnose`` shows and ``oom``'s gate reads.

The knobs follow each failure's own text (core/engines/vllm/failures.py): the runtime prefill OOM is the
recipe (one step lower ``--gpu-memory-utilization``, ``--max-num-batched-tokens 4096``, expandable segments);
the sampler warm-up OOM halves ``--max-num-seqs``; the max_model_len check names the length vLLM estimated
would fit; the startup failures and another process on the GPU block the lowering recipe.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from remediate.core.diagnosis.advice import CHUNK, Recommendation
from remediate.core.engines.base import Verdict
from remediate.core.engines.vllm.failures import (
    MAX_MODEL_LEN,
    NO_CACHE_MEMORY,
    OTHER_PROCESS,
    RUNTIME_OOM,
    SAMPLER_OOM,
)

ALLOC_CONF = "expandable_segments:True"
DEFAULT_UTILIZATION = Decimal("0.9")  # vllm/config/cache.py CacheConfig.gpu_memory_utilization
STEP = Decimal("0.01")
DEFAULT_MAX_NUM_SEQS = 1024  # EngineArgs._set_default_args (0.11) on >= 70 GiB non-A100 GPUs; 256 elsewhere


def _utilization(text: str | None) -> Decimal:
    try:
        return Decimal(text) if text is not None else DEFAULT_UTILIZATION
    except InvalidOperation:
        return DEFAULT_UTILIZATION


def vllm_recommendation(verdict: Verdict, utilization: str | None = None, foreign: int = 0) -> Recommendation:
    """What to turn, and whether ``oom`` refuses (``blocking``, unless the failure is stale).

    ``utilization``: the unit's ``--gpu-memory-utilization`` as written (None: vLLM's 0.9); ``foreign``: the
    number of GPU processes outside the unit (nvidia-smi), said before anything else."""
    reasons = [verdict.direction]
    other: dict[str, int | str] = {}
    kind = verdict.kind
    blocking = verdict.blocking and not verdict.is_stale
    if foreign and kind != OTHER_PROCESS:
        reasons.insert(0, f"{foreign} other process(es) hold memory on the server's GPU: free it first")
        blocking = blocking or kind == RUNTIME_OOM
    lowered = _utilization(utilization) - STEP
    if kind == RUNTIME_OOM:
        other = {"--gpu-memory-utilization": format(lowered, "f"), "--max-num-batched-tokens": CHUNK}
        reasons.append("a prefill chunk did not fit beside the KV cache: a smaller pool and a bounded step leave room")
        return Recommendation(alloc_conf=ALLOC_CONF, other_flags=other, reasons=tuple(reasons), blocking=blocking,
                              kind=kind)  # fmt: skip
    if kind == SAMPLER_OOM:
        seqs = int(verdict.numbers.get("num_seqs", 0)) or DEFAULT_MAX_NUM_SEQS
        other = {"--max-num-seqs": max(1, seqs // 2)}
    elif kind == MAX_MODEL_LEN:
        estimated = int(verdict.numbers.get("estimated_max_len", 0))
        if estimated > 0:
            other = {"--max-model-len": estimated}
        reasons.append("lowering --gpu-memory-utilization would make the KV cache smaller still")
    elif kind == NO_CACHE_MEMORY:
        reasons.append("the weights and the profile run left nothing for the KV cache")
    if verdict.is_stale:
        reasons.append("the server started fine after this failure: the evidence is old")
    return Recommendation(other_flags=other, reasons=tuple(reasons), blocking=blocking, kind=kind)
