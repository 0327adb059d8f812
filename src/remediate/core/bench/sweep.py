"""PURE: the long-context sweep of ``remediate bench`` — lengths, exact prompts, skip rules, results.

Text prompts drift off the requested length and ``bench_serving`` samples lengths in [1, L] unless told
otherwise (sglang benchmark/datasets/random.py, ``--random-range-ratio``), so the sweep sends ``input_ids``:
exactly N ids, each request with its own first id (nothing of it can be in the prefix cache), ids drawn from a
range every tokenizer has as ordinary tokens. The RNG seed comes in from the caller.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from remediate.core.bench.latency import RequestMetrics, Summary, summarize
from remediate.core.numbers import as_int
from remediate.core.startup import tokens_from_info
from remediate.core.unitfile.report import MASK, mask_secrets
from remediate.errors import ConfigError

DEFAULT_CONTEXTS = "1k,8k,32k,46k,92k,185k"
DEFAULT_GEN = 24
# Tokens kept free of the KV pool besides prompt + generated ones (page rounding, the scheduler's reserve).
POOL_MARGIN = 64
# Ids below this are often special or byte-fallback tokens; the smallest vocabularies in use have 32k ids.
_LOW_ID = 1000
_DEFAULT_VOCAB = 32000
_TOP_RESERVE = 1024  # added/special tokens usually sit at the top of the vocabulary

_CONTEXT_RE = re.compile(r"(\d+)([kK]?)")
_SECRET_KEY = re.compile(r"(^|_)(key|token|secret)$|password", re.IGNORECASE)


def parse_contexts(text: str, *, flag: str = "--contexts") -> tuple[int, ...]:
    """``1k,8k,32k`` → (1024, 8192, 32768): integers or ``k`` (×1024), sorted short to long, deduplicated."""
    values: set[int] = set()
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ConfigError("no context lengths given (e.g. 1k,8k,32k)", source=flag)
    for item in items:
        match = _CONTEXT_RE.fullmatch(item)
        if not match:
            raise ConfigError(f"bad context length {item!r}: use integers or k suffixes (1k = 1024)", source=flag)
        value = int(match.group(1)) * (1024 if match.group(2) else 1)
        if value < 1:
            raise ConfigError(f"bad context length {item!r}: must be at least 1 token", source=flag)
        values.add(value)
    return tuple(sorted(values))


def safe_id_range(vocab_size: int | None) -> tuple[int, int]:
    """[low, high) of token ids safe to send: above the low special/byte ids, below the top reserve."""
    if vocab_size is None or vocab_size <= 0:
        return _LOW_ID, _DEFAULT_VOCAB - _TOP_RESERVE
    low = min(_LOW_ID, vocab_size // 8)
    high = max(low + 1, vocab_size - min(_TOP_RESERVE, vocab_size // 8))
    return low, high


def prompt_ids(length: int, *, seed: int, index: int, id_range: tuple[int, int]) -> list[int]:
    """Exactly ``length`` ids; request ``index`` of a sweep gets a first id no other request has (up to
    the range's size), so the prefix cache cannot match any of it."""
    low, high = id_range
    span = high - low
    if length <= 0:
        return []
    first = low + (seed + index) % span
    return [first, *(low + value % span for value in _splitmix64(_seed_of(seed, index), length - 1))]


_MASK64 = (1 << 64) - 1


def _seed_of(seed: int, index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "little")


def _splitmix64(state: int, count: int) -> list[int]:
    """``count`` pseudo-random 64-bit values from ``state`` (SplitMix64: fast, seedable, no I/O)."""
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        out.append(z ^ (z >> 31))
    return out


def generate_body(ids: Sequence[int], gen: int) -> dict[str, Any]:
    """The ``/generate`` request: exact ids, greedy, no early stop, streamed (sglang managers/io_struct.py
    ``GenerateReqInput``, entrypoints/http_server.py ``generate_request``)."""
    return {
        "input_ids": list(ids),
        "sampling_params": {"max_new_tokens": gen, "ignore_eos": True, "temperature": 0},
        "stream": True,
    }


@dataclass(frozen=True)
class ServerLimits:
    """What the server accepts, from its info document (``/server_info`` or ``/get_server_info``)."""

    max_total_num_tokens: int | None = None
    max_req_input_len: int | None = None
    context_length: int | None = None
    vocab_size: int | None = None


def limits_from_info(info: dict[str, Any], model_info: dict[str, Any] | None = None) -> ServerLimits:
    """The limits from the info document (``vocab_size`` also from ``/model_info`` where a server has it)."""
    vocab = None
    for doc in (model_info or {}, info):
        vocab = vocab or as_int(doc.get("vocab_size"))
    return ServerLimits(
        max_total_num_tokens=tokens_from_info(info),
        max_req_input_len=as_int(info.get("max_req_input_len")),
        context_length=as_int(info.get("context_length")) or as_int(info.get("context_len")),
        vocab_size=vocab,
    )


def skip_reason(requested: int, gen: int, limits: ServerLimits, margin: int = POOL_MARGIN) -> str | None:
    """Why the server cannot take a prompt of ``requested`` tokens plus ``gen`` new ones, if it cannot."""
    if limits.max_req_input_len is not None and requested >= limits.max_req_input_len:
        return f"{requested:,} tokens ≥ max_req_input_len {limits.max_req_input_len:,} (the server rejects it)"
    pool = limits.max_total_num_tokens
    if pool is not None and requested + gen > pool - margin:
        return (
            f"{requested:,} + {gen} tokens do not fit the KV pool: max_total_num_tokens {pool:,} "
            f"− {gen} − {margin} margin = {pool - gen - margin:,}"
        )
    if limits.context_length is not None and requested + gen > limits.context_length:
        return f"{requested:,} + {gen} tokens exceed the context length {limits.context_length:,}"
    return None


def mask_info(value: Any, key: str = "") -> Any:
    """A copy of an info document with secret-looking keys (``api_key``, ``hf_token``…), secret flags
    and URL credentials masked."""
    if key and _SECRET_KEY.search(key) and value not in (None, "", False):
        return MASK
    if isinstance(value, dict):
        return {k: mask_info(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_info(v) for v in value]
    if isinstance(value, str):
        return mask_secrets(value)  # URL passwords too (one linear scan)
    return value


@dataclass
class BenchPoint:
    """One context length of a sweep: ``ok``, ``skipped`` (with the reason) or ``failed``."""

    requested: int
    status: str
    note: str = ""
    runs: list[RequestMetrics] = field(default_factory=list)

    def _ok_runs(self) -> list[RequestMetrics]:
        return [r for r in self.runs if r.ok]

    def summary(self, metric: str) -> Summary:
        """``ttft``, ``itl``, ``e2e_latency``, ``prefill``, ``decode``, ``decode_wall`` over the runs."""
        runs = self._ok_runs()
        values: list[float | None]
        if metric == "itl":
            values = [v for r in runs for v in r.itl_s]
        else:
            attr = {
                "ttft": "ttft_s",
                "e2e_latency": "e2e_s",
                "prefill": "prefill_tok_s",
                "decode": "decode_tok_s",
                "decode_wall": "decode_wall_s",
            }[metric]
            values = [getattr(r, attr) for r in runs]
        return summarize(values)

    def _first(self, attr: str) -> int | None:
        for run in self.runs:
            value = getattr(run, attr)
            if value is not None:
                return int(value)
        return None

    @property
    def prompt_tokens(self) -> int | None:
        return self._first("prompt_tokens")

    @property
    def cached_tokens(self) -> int | None:
        return self._first("cached_tokens")

    def to_dict(self) -> dict[str, Any]:
        """The point in the ``--json`` schema (medians over the runs)."""
        return {
            "requested": self.requested,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "ttft_s": _round(self.summary("ttft").median, 4),
            "prefill_tok_s": _round(self.summary("prefill").median, 1),
            "decode_tok_s": _round(self.summary("decode").median, 2),
            "decode_wall_s": _round(self.summary("decode_wall").median, 4),
            "e2e_s": _round(self.summary("e2e_latency").median, 4),
            "runs": sum(1 for r in self.runs if r.ok),
            "status": self.status,
            "note": self.note,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def check_counts(requested: int, run: RequestMetrics) -> list[str]:
    """What the server's own counters say is wrong with a request: not exactly N prompt tokens, or cache hits."""
    problems = []
    if run.prompt_tokens != requested:
        problems.append(f"prompt_tokens {run.prompt_tokens} ≠ {requested:,} requested")
    if run.cached_tokens:
        problems.append(f"cached_tokens {run.cached_tokens:,} (prefill tok/s counts only uncached tokens)")
    return problems


@dataclass
class HostBench:
    """One host's sweep: the points in order, and why it stopped if it did."""

    host: str
    unit: str | None = None
    endpoint: str | None = None
    backend: str | None = None  # the unit's engine (bench_serving's ``--backend``: "sglang", "vllm")
    limits: ServerLimits = field(default_factory=ServerLimits)
    server_info: dict[str, Any] = field(default_factory=dict)
    points: list[BenchPoint] = field(default_factory=list)
    error: str | None = None
    journal: list[str] = field(default_factory=list)
    exit_code: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and all(p.status != "failed" for p in self.points)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "unit": self.unit,
            "endpoint": self.endpoint,
            "max_total_num_tokens": self.limits.max_total_num_tokens,
            "max_req_input_len": self.limits.max_req_input_len,
            "points": [p.to_dict() for p in self.points],
            "error": self.error,
            "journal": self.journal,
            "seconds": round(max(0.0, self.finished_at - self.started_at), 3),
        }
