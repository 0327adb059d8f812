"""PURE: what remediate needs to know of a server engine, as one value: its flags, port, endpoints, lines.

An :class:`Engine` is a description, not a framework: the layers above ask it for the engine's own words
(the fraction flag, the prefill flag, the capacity line, the failure reader) instead of asking ``if engine ==``.
A new engine is one folder under ``core/engines/`` building one of these, one line in the registry
(``core/engines/__init__.py``), and its side of each feature that does I/O per engine (host/bench/server.py
``BenchEngine``, host/plan/planner.py ``PlanEngine``). Nothing outside asks for a name
(tests/unit/test_engine_names.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from remediate.models import JsonObject

if TYPE_CHECKING:  # core/diagnosis reads the unit (core/unitfile), which reads the engines: a type only here
    from remediate.core.diagnosis.advice import Recommendation


@dataclass(frozen=True)
class Verdict:
    """An engine's reading of its latest failure, in the engine's own words (sglang's full diagnosis keeps its
    own richer types): the kind, which way the fix goes, whether ``oom``'s lowering recipe is refused
    (``blocking``), the telling line and the numbers in it."""

    kind: str
    direction: str
    blocking: bool
    line: str
    index: int  # the line's position in the lines read
    numbers: Mapping[str, float] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()
    is_stale: bool = False  # a good start came after it: it no longer blocks

    def to_dict(self) -> JsonObject:
        return {
            "kind": self.kind,
            "direction": self.direction,
            "blocking": self.blocking,
            "line": self.line,
            "numbers": dict(self.numbers),
            "evidence": list(self.evidence),
            "is_stale": self.is_stale,
        }


@dataclass(frozen=True)
class Engine:
    """One server family as remediate reads and edits it."""

    name: str  # "sglang", "vllm": the JSON's ``engine``
    label: str  # "sglang", "vLLM": in messages
    fraction_flag: str  # the memory fraction's flag, without dashes
    prefill_flag: str  # the per-step prefill bound's flag, without dashes
    context_flag: str  # the longest sequence the server takes (prompt + generated), without dashes
    default_port: int
    resolve_flag: Callable[[str], str | None]  # an argv option (without ``--``) → the canonical flag, or None
    bool_flags: frozenset[str]  # flags that take no value
    capacity: Callable[[Sequence[str]], int | None]  # the journal since a start → the KV pool in tokens
    capacity_name: str  # what that number is called in the engine's own words
    process_entry: str  # an ERE for one argv word of the server process (the environ read)
    startup_lines_ere: str  # ``grep -E`` for the startup lines in a whole journal (logged requests never crowd them)
    fraction_default: Decimal | None = None  # the engine's default when the unit sets none (None: refuse)
    prefill_can_disable: bool = True  # ``-1`` means "no bound" for this engine
    health_path: str = "/health"
    info_paths: tuple[str, ...] = ()  # JSON documents holding the resolved args and the pool (none: journal only)
    # a Prometheus text page → what it reports in the info document's keys (the pool as ``max_total_num_tokens``,
    # the fraction under ``fraction_key``); None: the engine's metrics say neither. Read at ``metrics_path``.
    metrics_info: Callable[[str], dict[str, object]] | None = None
    metrics_path: str = "/metrics"
    verdict: Callable[[Sequence[str]], Verdict | None] | None = None  # None: sglang's own diagnosis pipeline
    # (verdict, the unit's fraction as written, GPU processes outside the unit, the smallest GPU's total bytes
    # from nvidia-smi or None) → what diagnose recommends
    advise: Callable[[Verdict, str | None, int, int | None], Recommendation] | None = None
    abbreviates: Callable[[str], bool] = lambda _name: False  # an option word abbreviating a knob: refused
    # a --config YAML as the engine merges it into its argv (core/unitfile/config.py): the keys' underscores
    # dashed (vLLM's FlexibleArgumentParser) or verbatim (sglang); a false boolean flag as --no-KEY (vLLM's
    # BooleanOptionalAction) or left out; a boolean for a valued flag as its value (sglang: --flag true)
    config_dashes_keys: bool = False
    config_negates_false: bool = False
    config_bool_values: bool = True
    # a knob set only in a --config file that was not read refuses an implicit edit (sglang's units have always
    # been edited on the command line alone)
    guards_config_knobs: bool = False
    kv_bytes_flag: str | None = None  # the KV cache sized in bytes: the fraction then sizes nothing
    kv_bytes_refusal: Callable[[str], str] | None = None  # why the recipe is refused where that flag is set
    # by release (core/engines/version.py): where the server reports it (None: in its info document), its own
    # default fraction, the decode graph flag it accepts, what it says of the flags a command line writes
    version_path: str | None = None
    default_fraction_at: Callable[[tuple[int, ...] | None], float | None] | None = None
    graph_flag_at: Callable[[tuple[int, ...] | None], str | None] | None = None
    flag_problems_at: Callable[[list[str], tuple[int, ...] | None, str], list[str]] | None = None
    fraction_column: str = ""  # the plan table's fraction column ("" : the flag's name)
    # a request's limit follows from the pool (sglang's max_req_input_len); else it is the engine's own
    # (vLLM's max_model_len), and the plan table shows no such column
    has_pool_request_limit: bool = True

    @property
    def fraction_option(self) -> str:
        return f"--{self.fraction_flag}"

    @property
    def prefill_option(self) -> str:
        return f"--{self.prefill_flag}"

    @property
    def fraction_heading(self) -> str:
        return self.fraction_column or self.fraction_flag

    @property
    def context_option(self) -> str:
        return f"--{self.context_flag}"

    @property
    def fraction_key(self) -> str:
        """The JSON ``flags`` key: the flag as the engine's own config names it (``gpu_memory_utilization``)."""
        return self.fraction_flag.replace("-", "_")

    @property
    def prefill_key(self) -> str:
        return self.prefill_flag.replace("-", "_")
