"""PURE: why a vLLM server died, from its journal, and which way the fix goes.

Each text is vLLM's own (matched at the start of a message, after the prefixes and an exception class such
as ``ValueError: ``): startup ``No available memory for the cache blocks`` and the max_model_len check
(vllm/v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory``; V0: vllm/worker/worker.py
``raise_if_cache_size_invalid``), ``Free memory on device … is less than desired GPU memory utilization``
(vllm/v1/worker/gpu_worker.py ``Worker.init_device``), the sampler warm-up OOM
(vllm/v1/worker/gpu_model_runner.py ``_dummy_sampler_run``), and at runtime ``EngineCore encountered a fatal
error.`` (vllm/v1/engine/core.py ``run_engine_core``) with torch's ``CUDA out of memory`` after it.
``Engine core initialization failed. See root cause above.`` (vllm/v1/engine/utils.py
``wait_for_engine_startup``) is only a wrapper: the cause is read from the lines above it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from remediate.core.engines.vllm.logline import vllm_message
from remediate.core.logline import at_message

_NUM = r"\d+(?:\.\d+)?"

# kind → direction: what the operator changes.
OTHER_PROCESS = "other-process"  # another process holds GPU memory: said first, no flag can fix it
NO_CACHE_MEMORY = "no-cache-memory"  # raise --gpu-memory-utilization
MAX_MODEL_LEN = "max-model-len"  # raise --gpu-memory-utilization or lower --max-model-len
SAMPLER_OOM = "sampler-oom"  # fewer --max-num-seqs
RUNTIME_OOM = "runtime-oom"  # the prefill recipe: lower the utilization, bound the prefill, expandable segments
INIT_FAILED = "init-failed"  # the wrapper; never a cause of its own

DIRECTIONS: Mapping[str, str] = {
    OTHER_PROCESS: "free the GPU (another process holds its memory) or lower --gpu-memory-utilization",
    NO_CACHE_MEMORY: "raise --gpu-memory-utilization",
    MAX_MODEL_LEN: "raise --gpu-memory-utilization or lower --max-model-len",
    SAMPLER_OOM: "lower --max-num-seqs",
    RUNTIME_OOM: "lower --gpu-memory-utilization, bound --max-num-batched-tokens, expandable segments",
    INIT_FAILED: "read the cause above it",
}

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        OTHER_PROCESS,
        re.compile(
            rf"Free memory on device \(({_NUM})/({_NUM}) GiB\) on startup is less than desired GPU memory "
            rf"utilization \(({_NUM}), ({_NUM}) GiB\)"
        ),
    ),
    (NO_CACHE_MEMORY, re.compile(r"No available memory for the cache blocks\.")),
    (
        MAX_MODEL_LEN,
        re.compile(
            rf"To serve at least one request with the models's max seq len \((\d+)\), \(({_NUM}) GiB KV cache is "
            rf"needed, which is larger than the available KV cache memory \(({_NUM}) GiB\)\.(?: Based on the "
            r"available memory, the estimated maximum model length is (\d+)\.)?"
        ),
    ),
    (
        MAX_MODEL_LEN,
        re.compile(
            r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored "
            r"in KV cache \((\d+)\)"
        ),
    ),
    (SAMPLER_OOM, re.compile(r"CUDA out of memory occurred when warming up sampler with (\d+) dummy requests")),
    (INIT_FAILED, re.compile(r"Engine core initialization failed\.")),
)
_FATAL = re.compile(r"EngineCore encountered a fatal error\.")
# The start's own memory lines before a "No available memory": vllm/v1/worker/gpu_worker.py
# Worker.determine_available_memory logs "Available KV cache memory: %.2f GiB" (0.11; 0.34: "%s GiB" of
# mem_utils.format_gib, round(…, 2)) before the check that raises, so a failing start logs a figure ≤ 0;
# vllm/v1/worker/gpu_model_runner.py GPUModelRunner.load_model: "Model loading took %.4f GiB and %.6f seconds"
# (0.8.5, 0.11; 0.34's v1/worker/gpu/model_runner.py: "Model loading took %s GiB memory and %.6f seconds").
_AVAILABLE = re.compile(rf"Available KV cache memory: (-?{_NUM}) GiB\b")
_LOADING = re.compile(rf"Model loading took ({_NUM}) GiB(?: memory)? and ")
_TORCH_OOM = re.compile(rf"CUDA out of memory\. Tried to allocate ({_NUM}) (GiB|MiB)")
_NAMES: Mapping[str, tuple[tuple[str, ...], ...]] = {
    OTHER_PROCESS: (("free_gib", "total_gib", "utilization", "requested_gib"),),
    MAX_MODEL_LEN: (("max_model_len", "needed_gib", "available_gib", "estimated_max_len"),
                    ("max_model_len", "kv_tokens")),
    SAMPLER_OOM: (("num_seqs",),),
}  # fmt: skip
# How far after "EngineCore encountered a fatal error." torch's OOM text may stand (the traceback between).
FATAL_WINDOW = 80


@dataclass(frozen=True)
class VllmFailure:
    """One recognised failure: its kind, the fix's direction, the line, and the numbers in it."""

    kind: str
    index: int  # the line (in the lines given)
    evidence: str  # the message without prefixes
    numbers: Mapping[str, float] = field(default_factory=dict)

    @property
    def direction(self) -> str:
        return DIRECTIONS[self.kind]


@dataclass(frozen=True)
class VllmDiagnosis:
    """Every failure found, in order, and the cause: another process first, else the last real cause
    (the init wrapper is read past)."""

    failures: tuple[VllmFailure, ...] = ()

    @property
    def cause(self) -> VllmFailure | None:
        real = [f for f in self.failures if f.kind != INIT_FAILED]
        others = [f for f in real if f.kind == OTHER_PROCESS]
        return others[-1] if others else (real[-1] if real else None)

    @property
    def only_wrapper(self) -> bool:
        """The wrapper was seen but its cause was not in the lines read: read further back."""
        return self.cause is None and any(f.kind == INIT_FAILED for f in self.failures)


def _numbers(kind: str, variant: int, match: re.Match[str]) -> dict[str, float]:
    names = _NAMES.get(kind, ((),))
    groups = match.groups()
    return {name: float(value) for name, value in zip(names[min(variant, len(names) - 1)], groups, strict=False)
            if value is not None}  # fmt: skip


def start_memory(messages: Sequence[str], index: int) -> dict[str, float]:
    """The failing start's own memory lines before ``index``: its weights (``weights_gib``) and the KV memory its
    profile left (``available_kv_gib``, ≤ 0 when nothing was left). An "Available" line of an earlier start
    (before the last "Model loading took") is not this start's, unless it is ≤ 0 (no good start logs that)."""
    found: dict[str, float] = {}
    loaded_at = -1
    for i in range(index - 1, -1, -1):
        if (m := at_message(_LOADING, messages[i])) is not None:
            found["weights_gib"] = float(m[1])
            loaded_at = i
            break
    for i in range(index - 1, -1, -1):
        if (m := at_message(_AVAILABLE, messages[i])) is not None:
            if i > loaded_at or float(m[1]) <= 0:
                found["available_kv_gib"] = float(m[1])
            break
    return found


def diagnose_vllm(lines: Iterable[str]) -> VllmDiagnosis:
    """The failures in ``lines`` (raw journal or stderr lines, oldest first); never raises."""
    messages = [vllm_message(line)[0] for raw in lines for line in (str(raw).splitlines() or [""])]
    found: list[VllmFailure] = []
    fatal_at: int | None = None
    for index, text in enumerate(messages):
        variant = {MAX_MODEL_LEN: 0}
        for kind, pattern in _PATTERNS:
            match = at_message(pattern, text)
            seen = variant.get(kind, 0)
            variant[kind] = seen + 1
            if match is not None:
                found.append(VllmFailure(kind, index, text, _numbers(kind, seen, match)))
                break
        if at_message(_FATAL, text) is not None:
            fatal_at = index
            continue
        oom = at_message(_TORCH_OOM, text)
        if oom is not None and fatal_at is not None and index - fatal_at <= FATAL_WINDOW:
            size = float(oom.group(1)) / (1024 if oom.group(2) == "MiB" else 1)
            found.append(VllmFailure(RUNTIME_OOM, index, text, {"tried_gib": size}))
            fatal_at = None
    return VllmDiagnosis(tuple(found))
