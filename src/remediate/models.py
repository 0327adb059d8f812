"""The values that cross the I/O floors: a remote command's result (transport → host), a host's result and
progress callbacks (host → fleet → faces).

The bottom of the tree beside errors.py: it imports nothing from remediate. The pure core has its own value
types (core/*) and needs none of these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OUTCOMES = ("remediated", "restored", "unchanged", "drift", "rolled_back", "failed", "unreachable", "not_attempted")
# drift: the unit was right but the running server lacked a setting; `oom` restarted it and verified it
# (a dry run only reports it).
SUCCESS_OUTCOMES = frozenset({"remediated", "restored", "unchanged", "drift"})

ProgressFn = Callable[[str, str, str], None]
"""Live progress: ``(host, phase, detail)``; cli/render/results.py's LiveProgress is one."""


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
    extra: dict[str, Any] = field(default_factory=dict)  # the command's own data (status, plan, probe…), shown as is
    exit_code: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0
    # Several sglang units on the host (host/units.py), neither in the JSON: the units detection found when
    # none was named, and the host's one result per unit when it ran several (the fleet lists each).
    several_units: tuple[str, ...] = ()
    units: list[HostResult] = field(default_factory=list)

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
            "backups": self.backups,
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
            **self.extra,
            **({"dry_run": True} if self.is_dry_run else {}),
            "started_at": round(self.started_at, 3),
            "finished_at": round(self.finished_at, 3),
            "seconds": self.seconds,
        }
