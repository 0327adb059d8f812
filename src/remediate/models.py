"""The values that cross the I/O floors: a remote command's result (transport → host), a host's result and
progress callbacks (host → fleet → faces).

The bottom of the tree beside errors.py: it imports nothing from remediate. The pure core has its own value
types (core/*) and needs none of these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

OUTCOMES = ("remediated", "restored", "unchanged", "drift", "rolled_back", "failed", "unreachable", "not_attempted")
# drift: the unit was right but the running server lacked a setting; `oom` restarted it and verified it
# (a dry run only reports it).
SUCCESS_OUTCOMES = frozenset({"remediated", "restored", "unchanged", "drift"})

ProgressFn = Callable[[str, str, str], None]
"""Live progress: ``(host, phase, detail)``; cli/render/results.py's LiveProgress is one."""

JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"
"""A sub-document the pure core builds in its own schema (a finding, a recommendation, a plan, a saved
journal's source): models.py may not import the core's types, so it holds their JSON (docs/reference/JSON.md)."""


@dataclass(frozen=True)
class UnitState:
    """The unit's systemd state as `status` and `diagnose` read it (None from a saved journal)."""

    active_state: str | None = None
    sub_state: str | None = None
    n_restarts: int | None = None

    def to_dict(self) -> dict[str, JsonValue]:
        return {"active_state": self.active_state, "sub_state": self.sub_state, "n_restarts": self.n_restarts}


@dataclass(frozen=True)
class StatusReport:
    """`remediate status`'s own data: whether the unit is remediated and its state."""

    remediated: bool
    state: UnitState
    need_daemon_reload: bool

    def to_dict(self) -> dict[str, JsonValue]:
        return {"remediated": self.remediated, **self.state.to_dict(), "need_daemon_reload": self.need_daemon_reload}


@dataclass(frozen=True)
class DiagnosisReport:
    """`remediate diagnose`'s own data beside the findings and the recommendation (HostResult's fields):
    the state, how many findings and runs the journal held, the GPUs and who holds their memory."""

    state: UnitState
    all_findings: int
    is_stale: bool
    runs: int | None = None  # sglang's journal reader counts the server's starts; vLLM's and a verdict do not
    gpus: tuple[JsonObject, ...] = ()
    gpu_processes: tuple[JsonObject, ...] = ()
    foreign_gpu_processes: tuple[JsonObject, ...] = ()


@dataclass(frozen=True)
class ProbeReport:
    """``--probe TOKENS``: the crashing request sent once the server is healthy, and what it measured."""

    tokens: int
    ok: bool
    error: str | None = None  # the probe failed but the server lived: it stays
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_s: float | None = None
    prefill_tok_s: float | None = None

    def to_dict(self) -> dict[str, JsonValue]:
        if self.error is not None:
            return {"tokens": self.tokens, "ok": self.ok, "error": self.error}
        return {
            "tokens": self.tokens,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "ttft_s": self.ttft_s,
            "prefill_tok_s": self.prefill_tok_s,
            "ok": self.ok,
        }


@dataclass(frozen=True)
class InstanceOutcome:
    """One instance of ``oom --all-instances``'s roll."""

    unit: str
    outcome: str
    max_total_num_tokens: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "unit": self.unit,
            "outcome": self.outcome,
            "max_total_num_tokens": self.max_total_num_tokens,
            "error": self.error,
        }


@dataclass(frozen=True)
class BackupRow:
    """One backup of `remediate backups`: where, when, what restoring it would change."""

    path: str
    original: str
    time: float
    time_source: str  # "name" or "mtime"
    size: int
    sha256: str
    identical_to_current: bool
    changes: tuple[str, ...]
    prune: bool
    truncated: bool
    unsafe: str | None

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "path": self.path,
            "original": self.original,
            "time": self.time,
            "time_source": self.time_source,
            "size": self.size,
            "sha256": self.sha256,
            "identical_to_current": self.identical_to_current,
            "changes": list(self.changes),
            "prune": self.prune,
            "truncated": self.truncated,
            "unsafe": self.unsafe,
        }


@dataclass(frozen=True)
class BackupListing:
    """`remediate backups`' listing (JSON ``backups``, in place of the backups a change made) and, with
    --prune, what was deleted or, with --dry-run, what would be."""

    rows: tuple[BackupRow, ...]
    deleted: tuple[str, ...] | None = None
    would_delete: tuple[str, ...] | None = None


@dataclass(frozen=True)
class CommandResult:
    """What one remote command produced. A non-zero exit of a probe is data, not an error."""

    argv: str
    exited: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exited == 0


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float


@dataclass(frozen=True)
class EngineVersion:
    """The engine's version on one host and where it was read (core/engines/version.py reads it): ``server`` (the
    running server's own report), ``log`` (its startup line in the journal) or ``package`` (the engine's
    ``*.dist-info`` in the unit's interpreter: what the next start runs)."""

    engine: str  # "sglang", "vllm"
    version: str  # as the source spells it: "0.5.23", "0.5.5.post3", "0.11.0+cu128"
    source: str

    @property
    def release(self) -> tuple[int, ...]:
        """The leading numeric release: (0, 5, 23) for "0.5.23", (0, 5, 5) for "0.5.5.post3"."""
        head: list[int] = []
        for part in self.version.split("."):
            digits = ""
            for char in part:
                if not char.isdigit():
                    break
                digits += char
            if not digits:
                break
            head.append(int(digits))
            if digits != part:
                break
        return tuple(head)

    def to_dict(self) -> dict[str, str]:
        return {"engine": self.engine, "version": self.version, "source": self.source}

    def describe(self) -> str:
        """``sglang 0.5.23 (server)``: the human line's words."""
        return f"{self.engine} {self.version} ({self.source})"


@dataclass
class HostResult:
    """The outcome of one host, in the JSON schema of `remediate oom --json`."""

    host: str
    outcome: str = "not_attempted"
    unit: str | None = None
    unit_path: str | None = None
    changed: bool = False
    backup: str | None = None
    backups: list[str] = field(default_factory=list)
    diff: str = ""
    summary: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    flags_before: dict[str, str | None] = field(default_factory=dict)
    flags_after: dict[str, str | None] = field(default_factory=dict)
    env_before: dict[str, str | None] = field(default_factory=dict)
    env_after: dict[str, str | None] = field(default_factory=dict)
    max_total_num_tokens: int | None = None
    target_tokens: int | None = None
    phases: list[Phase] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    journal: list[str] = field(default_factory=list)
    error: str | None = None
    is_dry_run: bool = False  # --dry-run stopped before the commit: no observation is recorded (JSON "dry_run")
    exit_code: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0
    # Several sglang units on the host (host/units.py), neither in the JSON: the units detection found when
    # none was named, and the host's one result per unit when it ran several (the fleet lists each).
    several_units: tuple[str, ...] = ()
    units: list[HostResult] = field(default_factory=list)
    # The command's own data, each in the JSON when set (docs/reference/JSON.md lists which command sets which).
    status: StatusReport | None = None  # status
    diagnosis: DiagnosisReport | None = None  # diagnose
    engine: str | None = None  # status, diagnose, oom: "sglang" or "vllm"
    findings: tuple[JsonObject, ...] | None = None  # diagnose, oom: the latest failure's findings
    recommendation: JsonObject | None = None  # diagnose; oom when it refuses the recipe
    plan: JsonObject | None = None  # plan, oom --auto
    drift: tuple[str, ...] | None = None  # status, oom: what the running server lacks
    max_req_input_len: int | None = None  # oom: the longest prompt the verified server accepts
    probe: ProbeReport | None = None  # --probe
    observation: str | None = None  # the calibration log a healthy result was appended to
    instances: tuple[InstanceOutcome, ...] | None = None  # oom --all-instances
    unit_states: dict[str, str] | None = None  # JSON "units": the crash-state of each unit when none was picked
    source: JsonObject | None = None  # diagnose/plan --journal: the saved journal read
    backup_listing: BackupListing | None = None  # backups
    engine_version: EngineVersion | None = None  # status, diagnose: the engine's version and its source (JSON)

    @property
    def ok(self) -> bool:
        return self.outcome in SUCCESS_OUTCOMES

    @property
    def seconds(self) -> float:
        return round(max(0.0, self.finished_at - self.started_at), 3)

    @property
    def token_gap(self) -> float | None:
        """Relative gap to the target (negative = below target), e.g. -0.025 for 195,011 vs 200,000."""
        if self.max_total_num_tokens is None or not self.target_tokens:
            return None
        return (self.max_total_num_tokens - self.target_tokens) / self.target_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "unit": self.unit,
            "unit_path": self.unit_path,
            "outcome": self.outcome,
            "changed": self.changed,
            "backup": self.backup,
            "backups": self.backups
            if self.backup_listing is None
            else [row.to_dict() for row in self.backup_listing.rows],
            "diff": self.diff,
            "summary": self.summary,
            "notes": self.notes,
            "flags": {"before": self.flags_before, "after": self.flags_after},
            "env": {"before": self.env_before, "after": self.env_after},
            "max_total_num_tokens": self.max_total_num_tokens,
            "target_tokens": self.target_tokens,
            "token_gap": None if self.token_gap is None else round(self.token_gap, 4),
            "phases": [{"name": p.name, "seconds": round(p.seconds, 3)} for p in self.phases],
            "steps": self.steps,
            "warnings": self.warnings,
            "journal": self.journal,
            "error": self.error,
            **self._payload(),
            **({"dry_run": True} if self.is_dry_run else {}),
            **({"engine_version": self.engine_version.to_dict()} if self.engine_version is not None else {}),
            "started_at": round(self.started_at, 3),
            "finished_at": round(self.finished_at, 3),
            "seconds": self.seconds,
        }

    def _payload(self) -> dict[str, JsonValue]:
        """The command's own fields, in the order the JSON always had them."""
        out: dict[str, JsonValue] = {}
        if self.status is not None:
            out.update(self.status.to_dict())
        if self.diagnosis is not None:
            out.update(self.diagnosis.state.to_dict())
        if self.engine is not None:
            out["engine"] = self.engine
        if self.findings is not None:
            out["findings"] = list(self.findings)
        if self.diagnosis is not None:
            out["all_findings"] = self.diagnosis.all_findings
            out["is_stale"] = self.diagnosis.is_stale
            if self.diagnosis.runs is not None:
                out["runs"] = self.diagnosis.runs
        if self.recommendation is not None:
            out["recommendation"] = self.recommendation
        if self.diagnosis is not None:
            out["gpus"] = list(self.diagnosis.gpus)
            out["gpu_processes"] = list(self.diagnosis.gpu_processes)
            out["foreign_gpu_processes"] = list(self.diagnosis.foreign_gpu_processes)
        if self.plan is not None:
            out["plan"] = self.plan
        if self.drift is not None:
            out["drift"] = list(self.drift)
        if self.max_req_input_len is not None:
            out["max_req_input_len"] = self.max_req_input_len
        if self.probe is not None:
            out["probe"] = self.probe.to_dict()
        if self.instances is not None:
            out["instances"] = [i.to_dict() for i in self.instances]
        if self.observation is not None:
            out["observation"] = self.observation
        if self.unit_states is not None:
            out["units"] = dict(self.unit_states)
        if self.source is not None:
            out["source"] = self.source
        if self.backup_listing is not None and self.backup_listing.deleted is not None:
            out["deleted"] = list(self.backup_listing.deleted)
        if self.backup_listing is not None and self.backup_listing.would_delete is not None:
            out["would_delete"] = list(self.backup_listing.would_delete)
        return out
