"""PURE: a vLLM failure's verdict turned into the recommendation ``diagnose`` shows and ``oom``'s gate reads.

The knobs follow each failure's own text (core/engines/vllm/failures.py): the runtime prefill OOM is the
recipe (one step lower ``--gpu-memory-utilization``, ``--max-num-batched-tokens 4096``, expandable segments);
the sampler warm-up OOM halves ``--max-num-seqs``; the max_model_len check names the length vLLM estimated
would fit; the startup failures and another process on the GPU block the lowering recipe.
"""

from __future__ import annotations

import math
import re
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
from remediate.core.engines.vllm.sizing import LOGGED_GIB_ERROR

ALLOC_CONF = "expandable_segments:True"
# vllm/v1/worker/gpu_worker.py Worker.determine_available_memory (0.11, 0.34): with kv_cache_memory_bytes set it
# returns that size, logging "... reserved %.2fGiB memory for KV Cache as specified by kv_cache_memory_bytes config
# and skipped memory profiling. This does (does) not respect the gpu_memory_utilization config. ...": the
# utilization then sizes nothing, so lowering it (the recipe, a plan's rows) is meaningless.
KV_BYTES_FLAG = "--kv-cache-memory-bytes"
# vllm 0.34 v1/core/kv_cache_planning.py _more_kv_cache_memory_hint: the hint in "No available memory for the cache
# blocks. {hint}" with the extensible KV cache names the resolved utilization, or says none higher exists
_STATED = re.compile(r"within `gpu_memory_utilization`=(\d+(?:\.\d+)?); increase it")
_EXTENSIBLE_FULL = "The extensible KV cache already takes all device memory"


def kv_bytes_refusal(value: str) -> str:
    """The one line that refuses to plan or lower the utilization of a unit whose KV cache is sized in bytes."""
    return (
        f"{KV_BYTES_FLAG} {value} sizes the KV cache: vLLM skips its memory profiling and ignores "
        f"--gpu-memory-utilization, so lowering it changes nothing; lower {KV_BYTES_FLAG} by hand for headroom"
    )


DEFAULT_UTILIZATION = Decimal("0.9")  # 0.8.5/0.11 CacheConfig; diagnose passes a known release's (defaults.py)
STEP = Decimal("0.01")
DEFAULT_MAX_NUM_SEQS = 1024  # EngineArgs._set_default_args (0.11) on >= 70 GiB non-A100 GPUs; 256 elsewhere


def _utilization(text: str | None) -> Decimal:
    try:
        return Decimal(text) if text is not None else DEFAULT_UTILIZATION
    except InvalidOperation:
        return DEFAULT_UTILIZATION


def vllm_recommendation(
    verdict: Verdict, utilization: str | None = None, foreign: int = 0, total_bytes: int | None = None
) -> Recommendation:
    """What to turn, and whether ``oom`` refuses (``blocking``, unless the failure is stale).

    ``utilization``: the unit's ``--gpu-memory-utilization`` as written (None: vLLM's 0.9); ``foreign``: the
    number of GPU processes outside the unit (nvidia-smi), said before anything else; ``total_bytes``: the
    card's total (nvidia-smi), for the number "raise the utilization" goes to."""
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
        if _EXTENSIBLE_FULL in verdict.line:  # 0.34: utilization 1.0 already, no higher one exists
            reasons.append("the extensible KV cache already takes all the memory: lower --max-model-len or "
                           "--max-num-seqs, or use a GPU with more memory")  # fmt: skip
            return Recommendation(reasons=tuple(reasons), blocking=blocking, kind=kind)
        stated = _STATED.search(verdict.line)  # 0.34 names the resolved utilization: it wins over the default
        raised, said = _raised_utilization(
            verdict, Decimal(stated[1]) if stated else _utilization(utilization), total_bytes
        )
        reasons += said
        if raised is not None:
            other = {"--gpu-memory-utilization": format(raised, "f")}
    if verdict.is_stale:
        reasons.append("the server started fine after this failure: the evidence is old")
    return Recommendation(other_flags=other, reasons=tuple(reasons), blocking=blocking, kind=kind)


def _raised_utilization(
    verdict: Verdict, current: Decimal, total_bytes: int | None
) -> tuple[Decimal | None, list[str]]:
    """The utilization at which the start's own numbers leave room for a KV cache, and how it was found.

    vllm/v1/worker/gpu_worker.py: ``available = total × utilization − non_kv`` (``Worker.init_device``'s
    ``requested_memory``, ``determine_available_memory``), non-KV (weights, the profile's peak, non-torch
    memory) not depending on the utilization: the start that logged ``available ≤ 0`` at ``u`` has some room
    above ``u + (−available)/total``, the first 0.01 step above that. nvidia-smi's total is the card's; torch's
    is smaller by what the driver reserves (under 1 %), which the step up absorbs. Only the weights logged
    (0.8.5 logs no "Available KV cache memory"): above ``weights/total`` is a floor, not a number to set."""
    numbers = verdict.numbers
    if not total_bytes:
        return None, ["no number: the card's total memory is unknown (nvidia-smi was not read)"]
    total = total_bytes / 2**30
    available = numbers.get("available_kv_gib")
    if available is not None and available <= 0:
        raw = float(current) + (LOGGED_GIB_ERROR - available) / total
        if raw >= 1:
            return None, [f"the profile left {available:g} GiB at {current} of {total:.2f} GiB: no utilization up to "
                          "1 leaves room for a KV cache (more GPUs, a smaller --max-num-batched-tokens)"]  # fmt: skip
        raised = (Decimal(math.floor(raw * 100 + 1e-9)) + 1) / 100
        return raised, [
            f"the profile left {available:g} GiB for the KV cache at {current} of {total:.2f} GiB (nvidia-smi): "
            f"some room from {raw:.4f} → {raised}; one request of max_model_len needs more (its KV size is "
            "logged only once a pool exists)"
        ]
    weights = numbers.get("weights_gib")
    if weights is not None:
        return None, [
            f"no number: the start logged no 'Available KV cache memory' (vLLM before 0.11), only 'Model loading "
            f"took {weights:g} GiB': above {weights / total:.2f} of {total:.2f} GiB at the very least (the "
            "profile run's peak comes on top)"
        ]
    return None, ["no number: the start logged neither 'Available KV cache memory' nor 'Model loading took'"]
