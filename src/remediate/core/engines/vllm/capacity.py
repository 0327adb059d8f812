"""PURE: vLLM's KV pool as the budget model, and the ``max_model_len`` floor no plan goes below silently.

vLLM V1 sizes its pool (vllm/v1/worker/gpu_worker.py ``Worker.determine_available_memory``)::

    available = total × utilization − non_kv          # non_kv: weights + the profile's peak + non-torch memory
    tokens    = available // (block_size × bytes a token) × block_size

which is sglang's formula (:mod:`remediate.core.capacity.pool`) with ``free0 = total`` and ``free1 = total −
non_kv``: ``free1 − free0 × (1 − u) = total × u − non_kv``, the page being vLLM's block. So the same model,
the same calibration on observations (one pool anchors, several fit the slope ``total / cell``) and the same
choice serve both engines; what ``total × (1 − u)`` leaves outside the pool is the headroom a prefill spike
needs. ``non_kv`` holds the profile run's peak at ``--max-num-batched-tokens``: a smaller budget frees some of
it, so a prediction for the same or a smaller budget is a floor of the pool.

vLLM refuses to start when one request of ``max_model_len`` does not fit the pool
(vllm/v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory``: ``max_memory_usage_bytes`` of the spec, whole
blocks, against the available bytes), so lowering the utilization can turn a runtime OOM into a startup
failure: :func:`floor_utilization` is the lowest utilization that still starts, and :func:`hold_floor` keeps a
plan at or above it, saying so and naming the alternative (an explicit ``--max-model-len``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from remediate.core.capacity.headroom import BudgetPlan, Row
from remediate.core.capacity.pool import GIB, BudgetModel, Unmodelled
from remediate.core.engines.vllm.sizing import LOGGED_GIB_ERROR
from remediate.core.engines.vllm.startup import VllmStartup

FRACTION_FLAG = "--gpu-memory-utilization"
CHUNK_FLAG = "--max-num-batched-tokens"
# vLLM's own default --gpu-memory-utilization, per version (its CacheConfig): 0.8.5 vllm/config.py and 0.11.0
# vllm/config/cache.py ``gpu_memory_utilization: float = 0.9``; 0.34.0 vllm/config/cache.py: None, resolved by
# ``CacheConfig.resolved_gpu_memory_utilization`` to 1.0 with the extensible KV cache (``enable_extensible_kv_cache``,
# on by default on CUDA and ROCm) and to ``DEFAULT_GPU_MEMORY_UTILIZATION = 0.92`` without it. By release
# (0.92 from 0.20): defaults.py, read from the journal's version line by host/plan/budget_vllm.py; 0.9 stands
# where neither the release nor the running server's mode (:func:`default_utilization`) is known.
DEFAULT_UTILIZATION = 0.9
EXTENSIBLE_UTILIZATION = 1.0  # 0.34 CacheConfig.resolved_gpu_memory_utilization, extensible KV cache
ESTIMATED_UTILIZATION = 0.92  # 0.34 CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION, estimate-based sizing
DEFAULT_BLOCK_SIZE = 16  # vllm/platforms/cuda.py check_and_update_config


@dataclass(frozen=True)
class VllmNumbers:
    """What the host says about a vLLM server's pool: the last start's logged numbers, the utilization it ran
    at, the GPU's total memory as torch sees it (``total_source`` says where it was read), the block size and
    ``max_model_len``."""

    startup: VllmStartup
    utilization: float | None
    total_gib: float | None
    total_source: str = ""
    block_size: int = DEFAULT_BLOCK_SIZE
    max_model_len: int | None = None


def vllm_model(numbers: VllmNumbers) -> BudgetModel | Unmodelled:
    """The budget model of the last start (not anchored: :func:`remediate.core.capacity.pool.calibrate` does)."""
    startup = numbers.startup
    available, tokens = startup.available_kv_gib, startup.kv_tokens
    if available is None or not tokens:
        return Unmodelled("no 'Available KV cache memory' and 'GPU KV cache size' lines from the server's start")
    if numbers.utilization is None:
        return Unmodelled("the server's --gpu-memory-utilization is unknown")
    total = numbers.total_gib if numbers.total_gib is not None else startup.total_gib
    if total is None or total <= 0:
        return Unmodelled(
            "the GPU's total memory is unknown (no nvidia-smi, no torch OOM text, no logged total_gpu_memory)"
        )
    cell = available * GIB / tokens
    non_kv = total * numbers.utilization - available
    source = f" ({numbers.total_source})" if numbers.total_source else ""
    notes = (
        f"vLLM: {available:.2f} GiB for {tokens:,} tokens at {numbers.utilization:g} of {total:.2f} GiB{source}; "
        f"non-KV {non_kv:.2f} GiB (weights, profile peak, non-torch); KV {cell:,.0f} B/token",
    )
    return BudgetModel(
        free0_gib=total,
        free1_gib=total - non_kv,
        cell_bytes=cell,
        page_size=max(1, numbers.block_size),
        context_len=numbers.max_model_len,
        notes=notes,
    )


def floor_utilization(model: BudgetModel, max_model_len: int | None) -> float | None:
    """The lowest utilization, in hundredths rounded up, at which one request of ``max_model_len`` still fits
    the pool (the logged GiB's rounding as margin); None when unknown or when even 1.0 is not enough."""
    if not max_model_len or max_model_len <= 0 or model.free0_gib <= 0:
        return None
    page = max(1, model.page_size)
    needed_gib = math.ceil(max_model_len / page) * page * model.cell_bytes / GIB + LOGGED_GIB_ERROR
    raw = 1.0 - (model.free1_gib - needed_gib) / model.free0_gib
    if not math.isfinite(raw) or raw > 1.0:
        return None
    return max(math.ceil(round(raw * 100, 6)) / 100, 0.01)


def longest_fitting(model: BudgetModel, utilization: float) -> int:
    """The longest ``--max-model-len`` whose one request fits the pool at ``utilization`` (whole blocks)."""
    available = model.free1_gib - model.free0_gib * (1.0 - utilization) - LOGGED_GIB_ERROR
    if available <= 0 or model.cell_bytes <= 0:
        return 0
    page = max(1, model.page_size)
    return int(available * GIB / model.cell_bytes) // page * page


def hold_floor(plan: BudgetPlan, model: BudgetModel, floor: float | None, max_model_len: int | None) -> BudgetPlan:
    """Rows below ``floor`` marked as not starting; a choice below it moved up to it, with a warning that says
    so and names the alternative (an explicit ``--max-model-len``)."""
    if floor is None or max_model_len is None:
        return plan
    rows = [_below(row) if row.fraction < floor - 1e-9 else row for row in plan.rows]
    chosen = plan.chosen
    if chosen is None or chosen.fraction >= floor - 1e-9:
        picked = next((r for r in rows if r.is_chosen), None)
        return replace(plan, rows=tuple(rows), chosen=picked)
    wanted = chosen.fraction
    fits = longest_fitting(model, wanted)
    at_floor = next((r for r in rows if abs(r.fraction - floor) < 1e-9), None)
    if at_floor is None:
        at_floor = Row(model.predict(floor), model.usable_bytes(floor), None, None)
        rows.append(at_floor)
    rows = sorted(
        (replace(r, is_chosen=r is at_floor) for r in rows), key=lambda r: r.fraction, reverse=True
    )  # fmt: skip
    held = next(r for r in rows if r.is_chosen)
    warning = (
        f"the headroom wants {FRACTION_FLAG} {wanted:g}, but below {floor:g} one request of max_model_len "
        f"{max_model_len:,} no longer fits the KV cache (vLLM would refuse to start); kept {floor:g}: to go lower, "
        f"set an explicit --max-model-len (at most {fits:,} at {wanted:g})"
    )
    meets = None if plan.target_tokens is None else held.prediction.tokens >= plan.target_tokens
    return replace(plan, rows=tuple(rows), chosen=held, meets_target=meets, warnings=(*plan.warnings, warning))


def below_floor(model: BudgetModel, utilization: float, max_model_len: int | None) -> str | None:
    """What to say when a utilization (the plain recipe's, one given by hand) is below the floor: vLLM would
    refuse to start there; None when it is not (or the floor is unknown)."""
    floor = floor_utilization(model, max_model_len)
    if floor is None or max_model_len is None or utilization >= floor - 1e-9:
        return None
    return (
        f"{FRACTION_FLAG} {utilization:g} is below {floor:g}, the lowest at which one request of max_model_len "
        f"{max_model_len:,} fits the KV cache: vLLM would refuse to start; use {floor:g}, or set an explicit "
        f"--max-model-len (at most {longest_fitting(model, utilization):,} at {utilization:g})"
    )


def _below(row: Row) -> Row:
    return replace(row, prediction=replace(row.prediction, is_viable=False), is_chosen=False)


@dataclass(frozen=True)
class CacheConfig:
    """``vllm:cache_config_info``'s labels on ``/metrics`` (vllm/v1/metrics/loggers.py,
    ``CacheConfig.metrics_info``)."""

    num_gpu_blocks: int | None = None
    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    is_extensible: bool | None = None  # enable_extensible_kv_cache (0.34+; None: the label is absent, older)

    @property
    def tokens(self) -> int | None:
        """The running server's pool in tokens: blocks × block size."""
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_cache_config(text: str) -> CacheConfig:
    """The cache config from a Prometheus text page (empty when the gauge is absent); never raises."""
    for line in text.splitlines():
        if not line.startswith("vllm:cache_config_info{"):
            continue
        labels = dict(_LABEL.findall(line[line.index("{") : line.rfind("}") + 1]))
        extensible = labels.get("enable_extensible_kv_cache")
        return CacheConfig(
            _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size")),
            _float(labels.get("gpu_memory_utilization")),
            None if extensible not in ("True", "False") else extensible == "True",
        )  # fmt: skip
    return CacheConfig()


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and 0 < value <= 1 else None


def default_utilization(cache: CacheConfig) -> float:
    """The utilization a server runs at when its unit sets none: 0.34's by the mode its ``/metrics`` reports
    (``CacheConfig.metrics_info`` holds every field, ``gpu_memory_utilization=None`` when unset), else 0.9."""
    if cache.is_extensible is None:
        return DEFAULT_UTILIZATION
    return EXTENSIBLE_UTILIZATION if cache.is_extensible else ESTIMATED_UTILIZATION
