"""PURE: vLLM's description for the engine seam: its flags as FlexibleArgumentParser reads them, port 8000,
``/health``, the ``GPU KV cache size`` line as the pool, and its failures with the direction of each fix.

vllm/engine/arg_utils.py ``EngineArgs``: ``--gpu-memory-utilization`` (default 0.9, vllm/config/cache.py
``CacheConfig``), ``--max-num-batched-tokens`` (the per-step token budget, the profile run's size), ``--max-model-len``;
vllm/entrypoints/openai/cli_args.py: ``--port`` 8000. No endpoint reports the pool in tokens (the startup line
of vllm/v1/core/kv_cache_utils.py is the source), so ``info_paths`` is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

from remediate.core.engines.base import Engine, Verdict
from remediate.core.engines.vllm.argv import BOOL_FLAGS, KNOBS, LIST_FLAGS, VALUE_FLAGS, canonical
from remediate.core.engines.vllm.defaults import default_utilization_at
from remediate.core.engines.vllm.failures import (
    DIRECTIONS,
    INIT_FAILED,
    MAX_MODEL_LEN,
    NO_CACHE_MEMORY,
    OTHER_PROCESS,
    diagnose_vllm,
    start_memory,
)
from remediate.core.engines.vllm.logline import vllm_message
from remediate.core.engines.vllm.startup import STARTUP_LINES_ERE, TOKENS_RE, parse_vllm_startup

if TYPE_CHECKING:
    from remediate.core.diagnosis.advice import Recommendation

# The failures the lowering recipe must not answer: at startup the pool was too small (lowering makes it
# smaller), or another process holds the GPU (said first: no flag of this unit frees it).
BLOCKING = frozenset({OTHER_PROCESS, NO_CACHE_MEMORY, MAX_MODEL_LEN})
_STARTUP = BLOCKING
_KNOWN = VALUE_FLAGS | BOOL_FLAGS | LIST_FLAGS
_BOOL_WORDS = BOOL_FLAGS | frozenset(f"no-{name}" for name in BOOL_FLAGS)


def resolve_vllm_flag(name: str) -> str | None:
    """``gpu_memory_utilization`` → ``gpu-memory-utilization`` (FlexibleArgumentParser's underscores); a flag
    remediate does not know is None (never guessed)."""
    flag = canonical(name)
    return flag if flag in _KNOWN or flag in _BOOL_WORDS else None


def abbreviates_vllm_knob(name: str) -> bool:
    """argparse would take ``--gpu-mem`` for ``--gpu-memory-utilization``: reported, never edited around."""
    flag = canonical(name)
    bare = flag[3:] if flag.startswith("no-") else flag
    return bool(bare) and bare not in _KNOWN and any(knob.startswith(bare) for knob in KNOBS)


def vllm_capacity(lines: Sequence[str]) -> int | None:
    """``GPU KV cache size: N tokens`` of the last start in ``lines`` (V1)."""
    return parse_vllm_startup(lines).kv_tokens


def vllm_metrics_info(text: str) -> dict[str, object]:
    """What ``/metrics`` says of the running server, in the info document's keys: the pool in tokens
    (``vllm:cache_config_info``'s ``num_gpu_blocks`` × ``block_size``) and the ``gpu_memory_utilization`` it runs
    at (vllm/v1/metrics/loggers.py ``PrometheusStatLogger.log_metrics_info``: ``CacheConfig.metrics_info()`` as
    labels, 0.11.0 and on); a value the page does not hold is left out."""
    # core/engines/vllm/capacity.py reads the capacity model, which reads the unit: imported when first asked
    from remediate.core.engines.vllm.capacity import parse_cache_config

    cache = parse_cache_config(text)
    found = {"max_total_num_tokens": cache.tokens, "gpu_memory_utilization": cache.gpu_memory_utilization}
    return {key: value for key, value in found.items() if value is not None}


def vllm_verdict(lines: Sequence[str]) -> Verdict | None:
    """The latest failure in ``lines`` (oldest first) with its direction; None when none is there. A startup
    failure followed by a good start (its ``GPU KV cache size`` line) is stale."""
    diagnosis = diagnose_vllm(lines)
    cause = diagnosis.cause
    messages = [vllm_message(str(line))[0] for line in lines]
    if cause is None:
        if not diagnosis.only_wrapper:
            return None
        wrapper = [f for f in diagnosis.failures if f.kind == INIT_FAILED][-1]
        return Verdict(INIT_FAILED, DIRECTIONS[INIT_FAILED] + " (read more lines: --lines)", False,
                       wrapper.evidence, wrapper.index, {}, (wrapper.evidence,))  # fmt: skip
    later = messages[cause.index + 1 :]
    stale = cause.kind in _STARTUP and any(TOKENS_RE.match(text) for text in later)
    evidence = [cause.evidence]
    evidence += [f.evidence for f in diagnosis.failures if f.kind == INIT_FAILED and f.index > cause.index][-1:]
    numbers = dict(cause.numbers)
    if cause.kind == NO_CACHE_MEMORY:  # what the start measured: the number to raise the utilization to
        numbers.update(start_memory(messages, cause.index))
    return Verdict(cause.kind, cause.direction, cause.kind in BLOCKING, cause.evidence, cause.index,
                   numbers, tuple(evidence), stale)  # fmt: skip


def _kv_bytes_refusal(value: str) -> str:
    from remediate.core.engines.vllm.advice import kv_bytes_refusal  # loaded when first asked, as _advise is

    return kv_bytes_refusal(value)


def _advise(verdict: Verdict, utilization: str | None, foreign: int, total_bytes: int | None = None) -> Recommendation:
    # core/diagnosis reads the unit (core/unitfile), which reads this registry: imported when first asked
    from remediate.core.engines.vllm.advice import vllm_recommendation

    return vllm_recommendation(verdict, utilization, foreign, total_bytes)


VLLM = Engine(
    name="vllm",
    label="vLLM",
    fraction_flag="gpu-memory-utilization",
    prefill_flag="max-num-batched-tokens",
    context_flag="max-model-len",
    default_port=8000,
    resolve_flag=resolve_vllm_flag,
    bool_flags=_BOOL_WORDS,
    capacity=vllm_capacity,
    capacity_name="GPU KV cache size",
    metrics_info=vllm_metrics_info,
    process_entry="vllm[.]entrypoints[.].*|(.*/)?vllm",
    startup_lines_ere=STARTUP_LINES_ERE,
    fraction_default=Decimal("0.9"),  # 0.8.5/0.11's; a detected release's own: DesiredState.fraction_default
    prefill_can_disable=False,
    verdict=vllm_verdict,
    advise=_advise,
    abbreviates=abbreviates_vllm_knob,
    guards_config_knobs=True,
    kv_bytes_flag="kv-cache-memory-bytes",  # vllm/config/cache.py CacheConfig.kv_cache_memory_bytes
    kv_bytes_refusal=_kv_bytes_refusal,
    config_dashes_keys=True,  # vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args dashes them
    config_negates_false=True,
    config_bool_values=False,
    version_path="/version",  # vllm entrypoints/openai/api_server.py show_version (0.8.5 … 0.11.0)
    default_fraction_at=default_utilization_at,
    fraction_column="gpu-memory-util",
    has_pool_request_limit=False,  # a request's limit is max_model_len, not the pool
)
