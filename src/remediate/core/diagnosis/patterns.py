"""The crash texts of sglang and torch, one matcher per kind: torch c10/cuda/CUDACachingAllocator.cpp (the CUDA
OOM), sglang model_executor/pool_configurator.py (``Not enough memory``), model_executor/runner/
decode_cuda_graph_runner.py (``Capture cuda graph failed``), managers/scheduler.py (``hit an exception``);
Python's argparse.py ``ArgumentParser.error`` (``PROG: error: …``, exit 2) for a flag the server's version
rejects; sglang disaggregation/mooncake/utils.py and weight_cache/daemon.py for expandable segments refused.

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
# Python argparse.py ArgumentParser.error: "%(prog)s: error: %(message)s", then sys.exit(2); the messages are
# _parse_optional's "ambiguous option: %(option)s could match %(matches)s" (the option as written, "=value"
# included), parse_args's "unrecognized arguments: %s" and _get_values's "argument %s: …". sglang 0.5.23's
# prog is "sglang serve" (server_args.py prepare_server_args); 0.5.5's the script's name ("launch_server.py").
_ARGPARSE = re.compile(
    r"(?P<prog>[\w./-]+(?: [\w./-]+)?): error: (?:"
    r"ambiguous option: (?P<ambiguous>--?[\w-]+)(?:=\S*)? could match (?P<matches>--?[\w-]+(?:, --?[\w-]+)*)"
    r"|unrecognized arguments: (?P<unknown>.+)"
    r"|argument (?P<argument>--?[\w-]+)(?:/--?[\w-]+)*: (?P<why>.+))"
)
# systemd src/core/service.c service_sigchld_event: "Main process exited, code=exited, status=2/INVALIDARGUMENT"
# (exit status names from src/basic/exit-status.c: 2 is EXIT_INVALIDARGUMENT)
_EXIT_2 = re.compile(r"(?:\S+: )?Main process exited, code=exited, status=2/INVALIDARGUMENT")
# sglang 0.5.23 disaggregation/mooncake/utils.py _validate_efa_allocator_compatibility (a ValueError at the
# MooncakeKVManager's start, disaggregation/mooncake/conn.py) and weight_cache/daemon.py
# WeightCacheDaemon._assert_ipc_compatible_allocator (a RuntimeError before the daemon loads weights)
_EFA_EXPANDABLE = re.compile(
    r"(PYTORCH_(?:CUDA_)?ALLOC_CONF) enables expandable_segments, which is incompatible with MOONCAKE_PROTOCOL=efa"
)
_DAEMON_EXPANDABLE = re.compile(
    r"\[WeightCacheDaemon\] (PYTORCH_(?:CUDA_)?ALLOC_CONF) sets expandable_segments:True, which is incompatible "
    r"with CUDA IPC weight sharing"
)
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


def _argparse(line: LogLine, following: Sequence[LogLine]) -> Match | None:
    """argparse refused the command line (exit 2 at startup): the flag, and what the parser offered instead."""
    if (m := at_message(_ARGPARSE, line.text)) is None:
        return None
    values: dict[str, Any] = {"note": f"{m['prog']} exited 2 (argparse): a configuration error, not an OOM"}
    if m["ambiguous"]:
        values["bad_flag"] = m["ambiguous"]
        values["flag_choices"] = tuple(m["matches"].split(", "))
    elif m["unknown"]:
        values["bad_flag"] = m["unknown"].split()[0]
    else:
        values["bad_flag"] = m["argument"]
    extra = tuple(f for f in following[:4] if _EXIT_2.match(f.text))[:1]
    return Match("invalid_server_argument", values, extra=extra, dedupe=str(values["bad_flag"]))


def _allocator(line: LogLine) -> Match | None:
    """sglang refused expandable segments at startup (Mooncake over EFA, the weight-cache daemon)."""
    if m := at_message(_EFA_EXPANDABLE, line.text):
        note = f"{m[1]} enables expandable_segments and MOONCAKE_PROTOCOL=efa is set (sglang's Mooncake over EFA)"
        return Match("expandable_segments_refused", {"note": note}, dedupe="efa")
    if m := at_message(_DAEMON_EXPANDABLE, line.text):
        note = f"{m[1]} sets expandable_segments:True and the weight-cache daemon runs (--weight-cache-mode daemon)"
        return Match("expandable_segments_refused", {"note": note}, dedupe="daemon")
    return None


def match_line(line: LogLine, following: Sequence[LogLine]) -> Match | None:
    """The finding one line carries (checked most specific first), or None."""
    text = line.text
    if mark := at_message(OOM_MARK, text):
        return _torch(line, mark, following)
    if (capture := at_message(_CAPTURE, text)) and _OUT_OF_MEMORY.search(text, capture.end()):
        flag = _graph_flag(following)
        return Match("cuda_oom_graph_capture", {"graph_flag": flag} if flag else {}, phase="graph_capture")
    return (
        _startup(line)
        or _kv(line, following)
        or _cuda_error(line)
        or _unbalanced(line)
        or _argparse(line, following)
        or _allocator(line)
    )
