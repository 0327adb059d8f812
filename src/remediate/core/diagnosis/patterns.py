"""The crash texts of sglang and torch, one matcher per kind: torch c10/cuda/CUDACachingAllocator.cpp (the CUDA
OOM), sglang model_executor/pool_configurator.py (``Not enough memory``), model_executor/runner/
decode_cuda_graph_runner.py (``Capture cuda graph failed``), managers/scheduler.py (``hit an exception``).

Each text is matched only where its message starts (``logline.at_message``): a request or prompt that sglang
logs in the middle of a line is never evidence. The numbers inside a matched message are read after it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from remediate.core.diagnosis.findings import Finding, Kind, Phase
from remediate.core.diagnosis.sizes import gib_to_bytes
from remediate.core.diagnosis.torch_oom import OOM_MARK, parse_torch_oom
from remediate.core.logline import LogLine, at_message

_NUM = r"(\d+(?:\.\d+)?)"
_CAPTURE = re.compile(r"Capture (?:prefill )?cuda graph failed", re.IGNORECASE)
# sglang cuda_graph_runner.py: "Possible solutions:\n1. set --mem-fraction-static …\n2. set --cuda-graph-max-bs …"
_GRAPH_FLAG = re.compile(r"(?:\d+\. )?set (--cuda-graph-max-bs(?:-decode)?) to a smaller value")
_NOT_ENOUGH = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static"
    rf"(?:\.? Current value: (?:self\.server_args\.)?mem_fraction_static={_NUM})?"
)
_NO_KV = re.compile(
    r"Loaded weights leave no GPU memory for the KV cache"
    rf"(?: under --mem-fraction-static={_NUM})?(?:\. Raise --mem-fraction-static above {_NUM})?"
    rf"(?: \(minimum viable = [^=()]*= {_NUM})?"
)
_KV_EXHAUSTED = re.compile(r"(Prefill|Decode) out of memory(?! happened)")
_TRY_TOKENS = re.compile(r"Try to allocate (\d+) tokens")
_AVAILABLE_TOKENS = re.compile(r"Available tokens: (\d+)")
_REQ_SLOTS = re.compile(r"alloc_req_slots runs out of memory")
_REQ_SLOTS_NUMS = re.compile(r"available_size\(\)=(\d+), num_reqs=(\d+)")
_CUDA_ERROR = re.compile(r"CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY|CUBLAS_STATUS_ALLOC_FAILED")
_FLASHINFER = re.compile(r"Failed to allocate memory for (\S+) with size (\d+)")
_OUT_OF_MEMORY = re.compile(r"out of memory", re.IGNORECASE)
_ILLEGAL = re.compile(r"an illegal memory access was encountered")
_UNBALANCED = re.compile(r"The memory capacity is unbalanced")
_MIN_GPU = re.compile(rf"min_per_gpu_memory={_NUM}")
_LOCAL_GPU = re.compile(rf"local_gpu_memory={_NUM}")


@dataclass(frozen=True)
class Match:
    """What one line says; ``finding()`` adds where it sits."""

    kind: Kind
    values: dict[str, Any] = field(default_factory=dict)
    phase: Phase | None = None
    extra: tuple[LogLine, ...] = ()  # following lines that belong to the message (KV exhaustion's counts)
    dedupe: str = ""

    def as_kind(self, kind: Kind) -> Match:
        return replace(self, kind=kind)

    def with_note(self, note: str) -> Match:
        return replace(self, values={**self.values, "note": note})

    def finding(self, *, line: LogLine, evidence: tuple[str, ...], run: int, rank: int | None, **more: Any) -> Finding:
        values = {**self.values, **{k: v for k, v in more.items() if v is not None}}
        return Finding(
            kind=self.kind, line=line.evidence, evidence=evidence, index=line.index, run=run, rank=rank, **values
        )


def _fraction(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:  # pragma: no cover - the regexes admit only decimals
        return None


def _graph_flag(following: Sequence[LogLine]) -> str | None:
    return next((m[1] for f in following if (m := _GRAPH_FLAG.match(f.text))), None)


def _torch(line: LogLine, mark: re.Match[str], following: Sequence[LogLine]) -> Match:
    text = line.text
    oom = parse_torch_oom(text[mark.start() :])
    assert oom is not None, "match_line found OOM_MARK"
    values: dict[str, Any] = {"oom": oom, "tried_bytes": oom.tried_bytes}
    # the same OOM re-raised (chained, or wrapped as "Capture cuda graph failed: …", maybe cut) is one finding
    dedupe = f"{oom.gpu}/{oom.tried_bytes}/{oom.total_bytes}/{oom.free_bytes}" if oom.tried_bytes else text[:400]
    if at_message(_CAPTURE, text):
        flag = _graph_flag(following)
        if flag:
            values["graph_flag"] = flag
        return Match("cuda_oom_graph_capture", values, phase="graph_capture", dedupe=dedupe)
    return Match("cuda_oom_runtime", values, dedupe=dedupe)


def _startup(line: LogLine) -> Match | None:
    text = line.text
    if m := at_message(_NO_KV, text):
        values = {
            "mem_fraction_static": _fraction(m[1]),
            "suggested_fraction": _fraction(m[2]),
            "minimum_fraction": _fraction(m[3]),
        }
        return Match("kv_pool_too_small_at_startup", {k: v for k, v in values.items() if v is not None})
    if m := at_message(_NOT_ENOUGH, text):
        values = {"mem_fraction_static": _fraction(m[1])} if m[1] else {}
        return Match("kv_pool_too_small_at_startup", values)
    return None


def _kv(line: LogLine, following: Sequence[LogLine]) -> Match | None:
    text = line.text
    if m := at_message(_KV_EXHAUSTED, text):
        extra: list[LogLine] = []
        values: dict[str, Any] = {}
        # sglang's message goes on in the next lines ("Try to allocate N tokens.", "Available tokens: N …")
        for f in [line, *following[:4]]:
            rest = text[m.end() :] if f is line else f.text
            found = _TRY_TOKENS.search(rest) if f is line else _TRY_TOKENS.match(rest)
            if found and "tokens_requested" not in values:
                values["tokens_requested"] = int(found[1])
                extra += [f] if f is not line else []
            found = _AVAILABLE_TOKENS.search(rest) if f is line else _AVAILABLE_TOKENS.match(rest)
            if found and "tokens_available" not in values:
                values["tokens_available"] = int(found[1])
                extra += [f] if f is not line else []
        phase: Phase = "prefill" if m[1] == "Prefill" else "decode"
        return Match("kv_pool_exhausted", values, phase=phase, extra=tuple(extra))
    if slots := at_message(_REQ_SLOTS, text):
        values = {}
        if n := _REQ_SLOTS_NUMS.search(text, slots.end()):
            values = {"slots_available": int(n[1]), "running_requests": int(n[2])}
        return Match("req_slots_exhausted", values)
    return None


def _cuda_error(line: LogLine) -> Match | None:
    text = line.text
    if m := at_message(_FLASHINFER, text):
        return Match("cuda_error_oom", {"tried_bytes": int(m[2]), "note": f"flashinfer buffer {m[1]}"}, dedupe=m[1])
    if m := at_message(_CUDA_ERROR, text):
        return Match("cuda_error_oom", {}, dedupe=m[0])
    if at_message(_ILLEGAL, text):
        note = "an illegal memory access can be an OOM reported late (sglang FAQ), or a kernel bug"
        return Match("cuda_error_oom", {"is_possible": True, "note": note}, dedupe="illegal")
    return None


def _unbalanced(line: LogLine) -> Match | None:
    if (head := at_message(_UNBALANCED, line.text)) is None:
        return None
    values: dict[str, Any] = {}
    if m := _MIN_GPU.search(line.text, head.end()):
        values["min_gpu_memory_bytes"] = gib_to_bytes(m[1])
    if m := _LOCAL_GPU.search(line.text, head.end()):
        values["local_gpu_memory_bytes"] = gib_to_bytes(m[1])
    return Match("tp_memory_unbalanced", values)


def match_line(line: LogLine, following: Sequence[LogLine]) -> Match | None:
    """The finding one line carries (checked most specific first), or None."""
    text = line.text
    if mark := at_message(OOM_MARK, text):
        return _torch(line, mark, following)
    if (capture := at_message(_CAPTURE, text)) and _OUT_OF_MEMORY.search(text, capture.end()):
        flag = _graph_flag(following)
        return Match("cuda_oom_graph_capture", {"graph_flag": flag} if flag else {}, phase="graph_capture")
    return _startup(line) or _kv(line, following) or _cuda_error(line) or _unbalanced(line)
