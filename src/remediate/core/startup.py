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

from remediate.core.logline import LogLine, split_line
from remediate.core.numbers import as_float, as_int

# Every startup number is printed with "%.2f" (sglang model_executor/model_runner.py, mem_cache/memory_pool.py,
# managers/scheduler.py): digits, optionally a fraction. Never "1.2.3": such text is not a startup line.
_NUM = r"\d+(?:\.\d+)?"
# A rank prefix in any time format ("[t TP0] ", "[2026-12-01T09:06:33+00:00 DP0 TP3] "): sglang's logger
# format can be changed, so the ranks, not the time, tell a startup line.
_RANK_RE = re.compile(r"\[[^\[\]]*?((?: [A-Z][A-Z_]*\d+)+)\] ")
# sglang model_executor/model_runner.py ``load_model``: "Load weight begin. avail mem=%.2f GB", then
# "Load weight end. elapsed=…, type=…, avail mem=%.2f GB, mem usage=%.2f GB." (older: no elapsed=).
LOAD_BEGIN_RE = re.compile(rf"Load weight begin\. avail mem=({_NUM}) GB")
LOAD_END_RE = re.compile(rf"Load weight end\..*?avail mem=({_NUM}) GB")
# sglang mem_cache/memory_pool.py (MHATokenToKVPool / MLATokenToKVPool ``_finalize_allocation_log``).
KV_RE = re.compile(
    r"(?:(?:Full|SWA) )?KV Cache (?:is allocated|VA upper bound)\. (?:dtype: \S+, )?#tokens: (\d+), "
    rf"(?:K size: ({_NUM}) GB, V size: ({_NUM}) GB|KV size: ({_NUM}) GB)"
)
# sglang 0.5.23 model_executor/model_runner_components/kv_pool_runtime.py ``compute_post_capture_kv_resize``: with
# SGLANG_ENABLE_POST_CAPTURE_KV_SIZING the pool line above says "VA upper bound" (a reservation, not the pool) and
# this line, after CUDA-graph capture, gives the pool the server runs.
POST_CAPTURE_RE = re.compile(
    rf"Post-capture KV sizing: KV cache allocated\. dtype: \S+, #tokens: (\d+), KV size: ({_NUM}) GB"
)
# sglang managers/scheduler.py (``Scheduler.__init__``, TP rank 0): the capacity line, every version from 0.4.6
# on; "available_gpu_mem=" (or "available_cpu_mem=") since 0.4.7.
CAPACITY_RE = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+|None), max_prefill_tokens=(\d+), "
    rf"max_running_requests=(\d+), context_len=(\d+)(?:, available_(?:gpu|cpu)_mem=({_NUM}) GB)?"
)
# sglang entrypoints/engine.py logs the resolved args at every start: up to 0.5.x "server_args=ServerArgs(…)", the
# dataclass repr; 0.5.23 ``server_args={…}``, the dict of ``_server_args_for_logging`` (ServerArgs.resolved_dict).
SERVER_ARGS_RE = re.compile(r"server_args=(?:ServerArgs\(|\{)")
# The same lines for ``grep -E`` over ``journalctl -o cat`` (sglang's one bracketed prefix, or none): the host
# reads a whole journal through it so that logged requests never crowd the startup lines out.
STARTUP_LINES_ERE = (
    r"^(\[[^]]*\] )?(server_args=(ServerArgs\(|[{])|Load weight (begin|end)\."
    r"|((Full|SWA) )?KV Cache (is allocated|VA upper bound)\.|Post-capture KV sizing: KV cache allocated\."
    r"|max_total_num_tokens=)"
)


def _arg(key: str, value: str) -> re.Pattern[str]:
    """One field of either repr — ``ServerArgs(a=1, b=2)`` or ``{'a': 1, 'b': 2}`` — never text inside a value:
    the field starts the repr or follows ", ", and a number runs to the next field."""
    return re.compile(rf"(?:(?<=\()|(?<=\{{)|(?<=, ))(?:{key}=|'{key}': )({value})(?=[,)}}]|$)")


_ARG_RE = {
    "mem_fraction_static": _arg("mem_fraction_static", _NUM),
    "page_size": _arg("page_size", r"\d+"),
    "max_total_tokens": _arg("max_total_tokens", r"\d+"),
    "chunked_prefill_size": _arg("chunked_prefill_size", r"-?\d+"),
    "cuda_graph_max_bs": _arg("cuda_graph_max_bs", r"\d+"),
    "max_running_requests": _arg("max_running_requests", r"\d+"),
    "tp_size": _arg("tp_size", r"\d+"),
    "attention_backend": _arg("attention_backend", r"'[^']*'"),
    "model_path": _arg("model_path", r"'[^']*'"),
    "speculative_algorithm": _arg("speculative_algorithm", r"'[^']*'"),
    "speculative_num_steps": _arg("speculative_num_steps", r"\d+"),
    "speculative_eagle_topk": _arg("speculative_eagle_topk", r"\d+"),
    "speculative_num_draft_tokens": _arg("speculative_num_draft_tokens", r"\d+"),
}
_TEXT_ARGS = ("model_path", "speculative_algorithm", "attention_backend")


@dataclass(frozen=True)
class Capacity:
    """sglang's capacity line: the pool it allocated and the limits it resolved."""

    max_total_num_tokens: int
    chunked_prefill_size: int | None  # None: chunking off ("None" in the line)
    max_prefill_tokens: int
    max_running_requests: int  # effective (possibly clamped) value
    context_len: int
    available_gpu_mem_gib: float | None  # headroom of the fresh server, after graphs (0.4.7+)


def parse_capacity(text: str) -> Capacity | None:
    """The capacity line at the start of ``text`` (a message without its prefixes), else None."""
    match = CAPACITY_RE.match(text)
    if match is None:
        return None
    chunk = match.group(2)
    return Capacity(
        max_total_num_tokens=int(match.group(1)),
        chunked_prefill_size=None if chunk == "None" else int(chunk),
        max_prefill_tokens=int(match.group(3)),
        max_running_requests=int(match.group(4)),
        context_len=int(match.group(5)),
        available_gpu_mem_gib=float(match.group(6)) if match.group(6) else None,
    )


def parse_capacity_line(lines: Iterable[str]) -> int | None:
    """The newest capacity line's ``max_total_num_tokens`` in raw journal lines, if any."""
    found: int | None = None
    for line in lines:
        capacity = parse_capacity(rank_and_message(split_line(0, line))[1])
        if capacity is not None:
            found = capacity.max_total_num_tokens
    return found


def parse_server_args(text: str) -> dict[str, int | float | str]:
    """The few resolved args remediate reads from a ``server_args=`` message, either repr (absent: not there)."""
    found: dict[str, int | float | str] = {}
    for key, pattern in _ARG_RE.items():
        match = pattern.search(text)
        if match:
            raw = match.group(1)
            found[key] = raw[1:-1] if key in _TEXT_ARGS else float(raw) if key == "mem_fraction_static" else int(raw)
    return found


@dataclass(frozen=True)
class StartupNumbers:
    """What one server start logged (the last start in the text). Per-rank values are the minimum."""

    free0_gib: float | None = None  # "Load weight begin. avail mem=": free before weights
    free1_gib: float | None = None  # "Load weight end. ... avail mem=": free after weights
    kv_tokens: int | None = None  # "KV Cache is allocated. #tokens: N"
    is_kv_pool: bool = False  # that line is the whole pool: "KV Cache is allocated" (no Full/SWA half, no VA bound)
    post_capture_tokens: int | None = None  # "Post-capture KV sizing: KV cache allocated. … #tokens: N"
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
    # speculative decoding: the draft worker's own "Load weight begin/end" and KV lines (min over ranks)
    draft_free1_gib: float | None = None  # free after the draft's weights
    draft_weights_gib: float | None = None  # its begin minus its end avail mem
    draft_kv_tokens: int | None = None
    draft_kv_gib: float | None = None
    is_draft_counted: bool = False  # the draft's weights were loaded before the target's pool was sized


def rank_and_message(line: LogLine) -> tuple[str, str]:
    """The TP/DP rank of a line and its message: "[2026-12-01 09:06:33 TP0] …" / "[… DP0 TP3] …", journald's
    prefix before it (any text in the brackets before the ranks)."""
    if line.has_sglang_prefix:
        return line.ranks, line.text
    match = _RANK_RE.match(line.text)
    return (match.group(1).strip(), line.text[match.end() :]) if match else ("", line.text)


def _min(values: Mapping[str, float]) -> float | None:
    return min(values.values()) if values else None


def parse_startup(lines: Iterable[str]) -> StartupNumbers:
    """The numbers of the last server start in journal/stderr text (a new ``server_args=`` starts over).

    A start still loading (or cut off) has no ``Load weight end`` yet: then the last start that has
    both memory lines is returned (a restart in progress does not hide what the previous start measured). A
    start of the same model that died before its KV pool (sglang 0.5.23's "Loaded weights leave no GPU memory
    for the KV cache", a startup ``Not enough memory``) gives way to the last one that allocated one.
    """
    block = _Block()
    complete: StartupNumbers | None = None
    for raw in lines:
        line = raw.rstrip("\n")
        rank, text = rank_and_message(split_line(0, line))
        is_args = bool(SERVER_ARGS_RE.match(text))
        if is_args or (rank in block.begin and LOAD_BEGIN_RE.match(text) and not block.is_draft_begin(rank)):
            done = block.numbers()
            if done.free0_gib is not None and done.free1_gib is not None:
                complete = done
            block = _Block(args=parse_server_args(text) if is_args else {})
            if is_args:
                continue
        block.feed(rank, line, text)
    last = block.numbers()
    if (last.free0_gib is None or last.free1_gib is None) and complete is not None:
        return complete
    if last.kv_tokens is None and complete is not None and complete.kv_tokens and _same_server(last, complete):
        return complete  # the last start died before its pool (sglang's startup floor): the one that had one
    return last


def _same_server(a: StartupNumbers, b: StartupNumbers) -> bool:
    """Two starts of the same weights on the same ranks (what the args say; unknown is no difference)."""
    return all(a.server_args.get(k) == b.server_args.get(k) for k in ("model_path", "tp_size")
               if k in a.server_args and k in b.server_args)  # fmt: skip


@dataclass
class _Block:
    """The lines of one server start, per rank."""

    args: dict[str, Any] = field(default_factory=dict)
    begin: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    kv: dict[str, tuple[int, float, bool]] = field(default_factory=dict)
    kv_kind: dict[str, bool] = field(default_factory=dict)  # rank → its pool line is the whole pool
    post_capture: dict[str, int] = field(default_factory=dict)
    capacity: Capacity | None = None
    evidence: list[str] = field(default_factory=list)
    # the draft worker's lines: a second "Load weight begin" on a rank of a speculative server is the draft's
    draft_begin: dict[str, float] = field(default_factory=dict)
    draft_end: dict[str, float] = field(default_factory=dict)
    draft_kv: dict[str, tuple[int, float, bool]] = field(default_factory=dict)
    counted: dict[str, bool] = field(default_factory=dict)  # the draft loaded before the target's KV line

    def is_draft_begin(self, rank: str) -> bool:
        return bool(self.args.get("speculative_algorithm")) and rank in self.end and rank not in self.draft_begin

    def feed(self, rank: str, line: str, text: str) -> None:
        if (match := LOAD_BEGIN_RE.match(text)) and self.is_draft_begin(rank):
            self.draft_begin[rank] = float(match.group(1))
            self.counted[rank] = rank not in self.kv
        elif match := LOAD_BEGIN_RE.match(text):
            self.begin[rank] = float(match.group(1))
        elif (match := LOAD_END_RE.match(text)) and rank in self.draft_begin:
            self.draft_end[rank] = float(match.group(1))
        elif match := LOAD_END_RE.match(text):
            self.end[rank] = float(match.group(1))
        elif (match := KV_RE.match(text)) and (rank not in self.kv or rank in self.draft_begin):
            tokens = int(match.group(1))
            sizes = self.kv if rank not in self.kv else self.draft_kv
            if rank in sizes:
                return  # a third pool line (SWA halves): the first of each worker is read
            if sizes is self.kv:
                self.kv_kind[rank] = text.startswith("KV Cache is allocated.")
            if match.group(4) is not None:
                sizes[rank] = (tokens, float(match.group(4)), True)
            else:
                sizes[rank] = (tokens, float(match.group(2)) + float(match.group(3)), False)
        elif (match := POST_CAPTURE_RE.match(text)) and rank not in self.post_capture:
            self.post_capture[rank] = int(match.group(1))
        elif capacity := parse_capacity(text):
            self.capacity = capacity
        else:
            return
        self.evidence.append(line)

    def numbers(self) -> StartupNumbers:
        kv_min = min(self.kv.values()) if self.kv else None
        capacity = self.capacity
        return StartupNumbers(
            free0_gib=_min(self.begin),
            free1_gib=_min(self.end),
            kv_tokens=kv_min[0] if kv_min else None,
            kv_gib=kv_min[1] if kv_min else None,
            is_mla=kv_min[2] if kv_min else None,
            is_kv_pool=bool(self.kv_kind) and all(self.kv_kind.values()),
            post_capture_tokens=min(self.post_capture.values()) if self.post_capture else None,
            max_total_num_tokens=capacity.max_total_num_tokens if capacity else None,
            chunked_prefill_size=capacity.chunked_prefill_size if capacity else None,
            max_running_requests=capacity.max_running_requests if capacity else None,
            context_len=capacity.context_len if capacity else None,
            available_gpu_mem_gib=capacity.available_gpu_mem_gib if capacity else None,
            server_args=dict(self.args),
            ranks=tuple(sorted(set(self.begin) | set(self.end) | set(self.kv))),
            evidence=tuple(self.evidence),
            **self._draft_numbers(),
        )

    def _draft_numbers(self) -> dict[str, Any]:
        ranks = set(self.draft_begin) & set(self.draft_end)
        if not ranks:
            return {}
        kv = min(self.draft_kv.values()) if self.draft_kv else None
        return {
            "draft_free1_gib": min(self.draft_end[r] for r in ranks),
            "draft_weights_gib": max(self.draft_begin[r] - self.draft_end[r] for r in ranks),
            "draft_kv_tokens": kv[0] if kv else None,
            "draft_kv_gib": kv[1] if kv else None,
            "is_draft_counted": all(self.counted.get(r, False) for r in ranks),
        }


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
    attention_backend: str | None = None  # resolved ("aiter" on ROCm: core/engines/sglang/resolved.py)
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    kvcache_gib: float | None = None  # internal_states[0].memory_usage.kvcache (0.4.10.post2+)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_server_info(data: Mapping[str, Any]) -> ServerSettings:
    """Read the budget-relevant keys of a parsed ``/server_info`` document; wrong types read as absent."""
    kvcache: float | None = None
    states = data.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        usage = states[0].get("memory_usage")
        if isinstance(usage, dict):
            kvcache = as_float(usage.get("kvcache"), text=True)
    page = as_int(data.get("page_size"), text=True, whole_float=True)
    return ServerSettings(
        mem_fraction_static=as_float(data.get("mem_fraction_static"), text=True),
        chunked_prefill_size=as_int(data.get("chunked_prefill_size"), text=True, whole_float=True),
        page_size=page if page and page > 0 else 1,
        max_total_tokens=as_int(data.get("max_total_tokens"), text=True, whole_float=True),
        max_total_num_tokens=tokens_from_info(data),
        context_length=as_int(data.get("context_length"), text=True, whole_float=True),
        max_req_input_len=as_int(data.get("max_req_input_len"), text=True, whole_float=True),
        max_running_requests=as_int(data.get("max_running_requests"), text=True, whole_float=True),
        tp_size=as_int(data.get("tp_size"), text=True, whole_float=True),
        model_path=_str(data.get("model_path")),
        attention_backend=_str(data.get("attention_backend")),
        speculative_algorithm=_str(data.get("speculative_algorithm")),
        speculative_num_steps=as_int(data.get("speculative_num_steps"), text=True, whole_float=True),
        speculative_eagle_topk=as_int(data.get("speculative_eagle_topk"), text=True, whole_float=True),
        speculative_num_draft_tokens=as_int(data.get("speculative_num_draft_tokens"), text=True, whole_float=True),
        kvcache_gib=kvcache,
    )


def tokens_from_info(data: Mapping[str, Any]) -> int | None:
    """The KV pool from a parsed ``/server_info`` document: top-level ``max_total_num_tokens`` (every version),
    else ``internal_states[0].memory_usage.token_capacity`` (sglang managers/scheduler.py ``get_internal_state``)."""
    value = as_int(data.get("max_total_num_tokens"), text=True, whole_float=True)
    if value is not None:
        return value
    states = data.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        usage = states[0].get("memory_usage")
        if isinstance(usage, dict):
            return as_int(usage.get("token_capacity"), text=True, whole_float=True)
    return None
