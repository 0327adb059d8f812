"""What the parser finds: typed, frozen findings with their evidence lines, grouped by run."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from remediate.core.diagnosis.torch_oom import GpuProcess, TorchOOM

Kind = Literal[
    "cuda_oom_runtime",
    "cuda_oom_graph_capture",
    "kv_pool_too_small_at_startup",
    "kv_pool_exhausted",
    "req_slots_exhausted",
    "cuda_error_oom",
    "tp_memory_unbalanced",
    "crash_loop",
    "invalid_server_argument",
    "expandable_segments_refused",
]
KINDS: tuple[Kind, ...] = get_args(Kind)  # every kind, in the order above
LOADING_NOTE = "while loading weights"  # a runtime-kind OOM whose traceback is in the weight loader
Phase = Literal["prefill", "decode", "graph_capture", "unknown"]


@dataclass(frozen=True)
class Finding:
    """One piece of crash evidence. Sizes are bytes; fields a kind does not have stay None."""

    kind: Kind
    line: str  # the telling line, as logged (sglang prefix kept)
    evidence: tuple[str, ...] = ()  # the lines that support it, in journal order
    index: int = -1  # position of ``line`` in the journal given
    run: int = 0  # which run of the server (0 = oldest in the journal given)
    rank: int | None = None  # TP rank when sglang's prefix said so
    oom: TorchOOM | None = None  # torch's CUDA OOM text, taken apart (the two cuda_oom kinds)
    tried_bytes: int | None = None  # the allocation that failed: torch's (``oom.tried_bytes``) or flashinfer's
    phase: Phase | None = None
    prefill_tokens: int | None = None
    running_requests: int | None = None
    # startup KV pool, KV exhaustion, TP imbalance, crash loop
    mem_fraction_static: float | None = None  # the value the failing run used, when printed
    suggested_fraction: float | None = None  # 0.5.2x "Raise --mem-fraction-static above Y"
    minimum_fraction: float | None = None  # 0.5.2x "minimum viable = ... = Z"
    tokens_requested: int | None = None
    tokens_available: int | None = None
    slots_available: int | None = None  # alloc_req_slots: free request slots when it failed
    graph_flag: str | None = None  # the --cuda-graph-max-bs spelling sglang's hint names
    bad_flag: str | None = None  # the option argparse refused (as written, without "=value")
    flag_choices: tuple[str, ...] | None = None  # what an ambiguous option could match, as argparse lists them
    min_gpu_memory_bytes: int | None = None
    local_gpu_memory_bytes: int | None = None
    restarts: int | None = None
    is_possible: bool = False  # the text may mean OOM, but need not (illegal memory access)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the kind and line first, None fields dropped, numbers as numbers; torch's numbers in line
        with the others (the JSON stays flat)."""
        out: dict[str, Any] = {}
        for name in _JSON_ORDER:
            value = getattr(self, name)
            if name == "processes":
                if value:
                    out["processes"] = [p.to_dict() for p in value]
            elif name in ("evidence", "flag_choices"):
                if value is not None:
                    out[name] = list(value)
            elif name == "is_possible":
                if value:
                    out["possible"] = True
            elif value is not None:
                out[name] = value
        return out

    # torch's numbers, read through (None, or no processes, when the finding is not torch's OOM)
    @property
    def torch_format(self) -> str | None:
        return self.oom.torch_format if self.oom else None

    @property
    def gpu(self) -> int | None:
        return self.oom.gpu if self.oom else None

    @property
    def total_bytes(self) -> int | None:
        return self.oom.total_bytes if self.oom else None

    @property
    def free_bytes(self) -> int | None:
        return self.oom.free_bytes if self.oom else None

    @property
    def allocated_bytes(self) -> int | None:
        return self.oom.allocated_bytes if self.oom else None

    @property
    def private_pools_bytes(self) -> int | None:
        return self.oom.private_pools_bytes if self.oom else None

    @property
    def reserved_unallocated_bytes(self) -> int | None:
        return self.oom.reserved_unallocated_bytes if self.oom else None

    @property
    def reserved_bytes(self) -> int | None:
        return self.oom.reserved_bytes if self.oom else None

    @property
    def allowed_bytes(self) -> int | None:
        return self.oom.allowed_bytes if self.oom else None

    @property
    def processes(self) -> tuple[GpuProcess, ...]:
        return self.oom.processes if self.oom else ()

    @property
    def neighbours(self) -> tuple[GpuProcess, ...]:
        """Other processes holding memory on the GPU (see the advisor for PID-namespace caveats)."""
        return tuple(p for p in self.processes if not p.self)


# The JSON keys of a finding, in the order they have always had (torch's between ``rank`` and ``phase``).
_JSON_ORDER = (
    "kind", "line", "evidence", "index", "run", "rank",
    "torch_format", "gpu", "tried_bytes", "total_bytes", "free_bytes", "allocated_bytes", "private_pools_bytes",
    "reserved_unallocated_bytes", "reserved_bytes", "allowed_bytes", "processes",
    "phase", "prefill_tokens", "running_requests", "mem_fraction_static", "suggested_fraction", "minimum_fraction",
    "tokens_requested", "tokens_available", "slots_available", "graph_flag", "bad_flag", "flag_choices",
    "min_gpu_memory_bytes", "local_gpu_memory_bytes", "restarts", "is_possible", "note",
)  # fmt: skip


@dataclass(frozen=True)
class RunFacts:
    """What one run of the server logged about its memory (the min over ranks where ranks differ)."""

    start_index: int = 0
    mem_fraction_static: float | None = None  # server_args=ServerArgs(... mem_fraction_static=...) or ={...}
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    tp_size: int | None = None
    speculative_algorithm: str | None = None  # a draft model runs next to the target (EAGLE, NEXTN, DFLASH…)
    free_before_weights_bytes: int | None = None  # "Load weight begin. avail mem="
    free_after_weights_bytes: int | None = None  # "Load weight end. ... avail mem="
    max_total_num_tokens: int | None = None
    available_gpu_mem_bytes: int | None = None  # the capacity line's headroom
    is_ready: bool = False  # "The server is fired up and ready to roll!"
    ready_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Diagnosis:
    """Every finding in the journal given, the runs it spans, and which failure is the latest."""

    findings: tuple[Finding, ...] = ()
    runs: tuple[RunFacts, ...] = field(default_factory=lambda: (RunFacts(),))
    show: dict[str, str] = field(default_factory=dict)

    @property
    def latest_failure_run(self) -> int | None:
        """The newest run with a crash finding (crash_loop is about the unit, not a run)."""
        crash_runs = [f.run for f in self.findings if f.kind != "crash_loop"]
        return max(crash_runs) if crash_runs else None

    @property
    def latest(self) -> tuple[Finding, ...]:
        """The findings of the latest failure, plus crash_loop."""
        run = self.latest_failure_run
        return tuple(f for f in self.findings if f.run == run or f.kind == "crash_loop")

    @property
    def is_stale(self) -> bool:
        """The latest failure is older than a later good start (a run that reached ready)."""
        run = self.latest_failure_run
        if run is None:
            return False
        return any(r.is_ready for r in self.runs[run + 1 :])

    @property
    def facts(self) -> RunFacts:
        """The memory facts of the latest failure's run (else of the newest run)."""
        run = self.latest_failure_run
        return self.runs[run if run is not None else len(self.runs) - 1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "latest_failure_run": self.latest_failure_run,
            "is_stale": self.is_stale,
            "runs": [r.to_dict() for r in self.runs],
        }
