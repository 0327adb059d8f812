"""PURE: the memory numbers an sglang server reports about itself at startup and on ``/server_info``.

sglang logs, per TP rank, the free GPU memory before and after loading the weights, the KV pool it
allocated and, on rank 0, the capacity line. Those numbers (and the resolved server args) are all the
budget model needs to redo sglang's pool arithmetic for any other ``--mem-fraction-static``. Lines may
carry journalctl's prefix and come from any rank, interleaved; unknown text is ignored. Each line is matched
at the start of its message (after journalctl's and sglang's prefixes): a request or prompt that sglang logs
("… max_total_num_tokens=1 …") is not a startup line.
All "GB" in sglang's logs are GiB.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remediate.core.diagnosis.lines import split_line

_RANK_RE = re.compile(r"\[[^\[\]]*?((?: [A-Z][A-Z_]*\d+)+)\] ")
_LOAD_BEGIN_RE = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")
_LOAD_END_RE = re.compile(r"Load weight end\. .*?avail mem=([\d.]+) GB")
_KV_RE = re.compile(
    r"(?:(?:Full|SWA) )?KV Cache (?:is allocated|VA upper bound)\. (?:dtype: \S+, )?#tokens: (\d+), "
    r"(?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)"
)
_CAPACITY_RE = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+|None), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+)(?:, available_(?:gpu|cpu)_mem=([\d.]+) GB)?"
)
_SERVER_ARGS_RE = re.compile(r"server_args=ServerArgs\(")
# A field of the ServerArgs repr (dataclass __repr__: "ServerArgs(a=1, b=2)"), not text inside a value.
_FIELD = r"(?:(?<=\()|(?<=, ))"
_ARG_RE = {
    "mem_fraction_static": re.compile(rf"{_FIELD}mem_fraction_static=([\d.]+)"),
    "page_size": re.compile(rf"{_FIELD}page_size=(\d+)"),
    "max_total_tokens": re.compile(rf"{_FIELD}max_total_tokens=(\d+)"),
    "chunked_prefill_size": re.compile(rf"{_FIELD}chunked_prefill_size=(-?\d+)"),
    "tp_size": re.compile(rf"{_FIELD}tp_size=(\d+)"),
    "model_path": re.compile(rf"{_FIELD}model_path='([^']*)'"),
    "speculative_algorithm": re.compile(rf"{_FIELD}speculative_algorithm='([^']*)'"),
}


@dataclass(frozen=True)
class StartupNumbers:
    """What one server start logged (the last start in the text). Per-rank values are the minimum."""

    free0_gib: float | None = None  # "Load weight begin. avail mem=": free before weights
    free1_gib: float | None = None  # "Load weight end. ... avail mem=": free after weights
    kv_tokens: int | None = None  # "KV Cache is allocated. #tokens: N"
    kv_gib: float | None = None  # K + V (MHA) or KV (MLA) size of that pool, per rank
    is_mla: bool | None = None
    max_total_num_tokens: int | None = None  # the capacity line (rank 0)
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None  # effective (possibly clamped) value
    context_len: int | None = None
    available_gpu_mem_gib: float | None = None  # headroom of the fresh server, after graphs
    server_args: Mapping[str, Any] = field(default_factory=dict)  # a few resolved args from server_args=
    ranks: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return self.free0_gib is None and self.free1_gib is None and self.max_total_num_tokens is None


def _rank_and_message(line: str) -> tuple[str, str]:
    """The TP/DP rank of a line and its message: "[2026-12-01 09:06:33 TP0] …" / "[… DP0 TP3] …", journald's
    prefix before it (any text in the brackets before the ranks)."""
    parts = split_line(0, line)
    if parts.has_sglang_prefix:
        return parts.ranks, parts.text
    match = _RANK_RE.match(parts.text)
    return (match.group(1).strip(), parts.text[match.end() :]) if match else ("", parts.text)


def _min(values: Mapping[str, float]) -> float | None:
    return min(values.values()) if values else None


def _server_args(line: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, pattern in _ARG_RE.items():
        match = pattern.search(line)
        if match:
            raw = match.group(1)
            found[key] = raw if key in ("model_path", "speculative_algorithm") else _number(raw)
    return found


def _number(raw: str) -> int | float:
    return float(raw) if "." in raw else int(raw)


def parse_startup(lines: Iterable[str]) -> StartupNumbers:
    """The numbers of the last server start in journal/stderr text (a new ``server_args=`` starts over).

    A start still loading (or cut off) has no ``Load weight end`` yet: then the last start that has
    both memory lines is returned (a restart in progress does not hide what the previous start measured).
    """
    block = _Block()
    complete: StartupNumbers | None = None
    for raw in lines:
        line = raw.rstrip("\n")
        rank, text = _rank_and_message(line)
        is_args = bool(_SERVER_ARGS_RE.match(text))
        if is_args or (rank in block.begin and _LOAD_BEGIN_RE.match(text)):
            done = block.numbers()
            if done.free0_gib is not None and done.free1_gib is not None:
                complete = done
            block = _Block(args=_server_args(text) if is_args else {})
            if is_args:
                continue
        block.feed(rank, line, text)
    last = block.numbers()
    if (last.free0_gib is None or last.free1_gib is None) and complete is not None:
        return complete
    return last


@dataclass
class _Block:
    """The lines of one server start, per rank."""

    args: dict[str, Any] = field(default_factory=dict)
    begin: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    kv: dict[str, tuple[int, float, bool]] = field(default_factory=dict)
    capacity: re.Match[str] | None = None
    evidence: list[str] = field(default_factory=list)

    def feed(self, rank: str, line: str, text: str) -> None:
        if match := _LOAD_BEGIN_RE.match(text):
            self.begin[rank] = float(match.group(1))
        elif match := _LOAD_END_RE.match(text):
            self.end[rank] = float(match.group(1))
        elif (match := _KV_RE.match(text)) and rank not in self.kv:
            tokens = int(match.group(1))
            if match.group(4) is not None:
                self.kv[rank] = (tokens, float(match.group(4)), True)
            else:
                self.kv[rank] = (tokens, float(match.group(2)) + float(match.group(3)), False)
        elif match := _CAPACITY_RE.match(text):
            self.capacity = match
        else:
            return
        self.evidence.append(line)

    def numbers(self) -> StartupNumbers:
        kv_min = min(self.kv.values()) if self.kv else None
        capacity = self.capacity
        chunk = capacity.group(2) if capacity else None
        return StartupNumbers(
            free0_gib=_min(self.begin),
            free1_gib=_min(self.end),
            kv_tokens=kv_min[0] if kv_min else None,
            kv_gib=kv_min[1] if kv_min else None,
            is_mla=kv_min[2] if kv_min else None,
            max_total_num_tokens=int(capacity.group(1)) if capacity else None,
            chunked_prefill_size=int(chunk) if chunk not in (None, "None") else None,
            max_running_requests=int(capacity.group(4)) if capacity else None,
            context_len=int(capacity.group(5)) if capacity else None,
            available_gpu_mem_gib=float(capacity.group(6)) if capacity and capacity.group(6) else None,
            server_args=dict(self.args),
            ranks=tuple(sorted(set(self.begin) | set(self.end) | set(self.kv))),
            evidence=tuple(self.evidence),
        )


@dataclass(frozen=True)
class ServerSettings:
    """The resolved settings ``/server_info`` (or ``/get_server_info``) reports."""

    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None  # None or <= 0: chunking off
    page_size: int = 1
    max_total_tokens: int | None = None  # the user's --max-total-tokens cap
    max_total_num_tokens: int | None = None  # the pool the server has
    context_length: int | None = None  # the user's --context-length (usually null)
    max_req_input_len: int | None = None
    max_running_requests: int | None = None  # the user's value
    tp_size: int | None = None
    model_path: str | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    kvcache_gib: float | None = None  # internal_states[0].memory_usage.kvcache (0.4.10.post2+)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def _float(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_server_info(data: Mapping[str, Any]) -> ServerSettings:
    """Read the budget-relevant keys of a parsed ``/server_info`` document; wrong types read as absent."""
    kvcache: float | None = None
    states = data.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        usage = states[0].get("memory_usage")
        if isinstance(usage, dict):
            kvcache = _float(usage.get("kvcache"))
    page = _int(data.get("page_size"))
    return ServerSettings(
        mem_fraction_static=_float(data.get("mem_fraction_static")),
        chunked_prefill_size=_int(data.get("chunked_prefill_size")),
        page_size=page if page and page > 0 else 1,
        max_total_tokens=_int(data.get("max_total_tokens")),
        max_total_num_tokens=_int(data.get("max_total_num_tokens")),
        context_length=_int(data.get("context_length")),
        max_req_input_len=_int(data.get("max_req_input_len")),
        max_running_requests=_int(data.get("max_running_requests")),
        tp_size=_int(data.get("tp_size")),
        model_path=_str(data.get("model_path")),
        speculative_algorithm=_str(data.get("speculative_algorithm")),
        speculative_num_steps=_int(data.get("speculative_num_steps")),
        speculative_eagle_topk=_int(data.get("speculative_eagle_topk")),
        speculative_num_draft_tokens=_int(data.get("speculative_num_draft_tokens")),
        kvcache_gib=kvcache,
    )
