"""The watcher's policy: which findings are fixed and the rails around a fix, with documented defaults.

The policy is a mapping (the loader reads the YAML file and hands in each key's line); every error names
the file, the line and the key, the way the inventory's do. Defaults, and the rail each comes from:

- ``fix.kinds: [cuda_oom_runtime]``, ``fix.how: auto`` (the ``oom --auto`` plan; ``recipe`` is the fixed step).
- ``cooldown: 1h`` — no second automatic fix of a host within the window (Event-Driven Ansible's
  ``throttle: once_within``).
- ``cap_per_day: 2`` — past it the host is ``needs_human`` (KubeadmControlPlane's ``remediation.maxRetry``).
- ``healthy_period: 6h`` — a host healthy that long starts a new count (KCP's ``minHealthyPeriod``).
- ``concurrency: 1`` — fixes in flight fleet-wide (kured's one-at-a-time lock).
- ``breaker: {percentage: 50, window: 5m}`` (and/or ``count``) — more crashed hosts than that within the
  window stops every automatic action until a person resumes (NVSentinel's circuit breaker, Cluster API
  MachineHealthCheck's ``maxUnhealthy``).
- ``lookback: 1h`` — how far back the first poll reads when there is no saved cursor.
- ``fold_window: 10m`` — a crash this soon after the last one of an open incident joins it (one crash loop).
- ``approval: false`` — when true, a decided fix waits for ``approve ID``.
- ``approval_ttl: 1h`` — an approval (asked for, or given and waiting for the rails) older than this expires:
  the host it was asked about may be another story by then (StackStorm ``core.ask``'s ``ttl``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from remediate.core.diagnosis.findings import KINDS
from remediate.errors import ConfigError

How = Literal["auto", "recipe"]
# Kinds whose fix would be to raise --mem-fraction-static (or is no fix at all): never automatic.
NEVER_FIXED = frozenset({"kv_pool_too_small_at_startup", "crash_loop"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_TOP = (
    "fix",
    "cooldown",
    "cap_per_day",
    "healthy_period",
    "concurrency",
    "breaker",
    "lookback",
    "fold_window",
    "approval",
    "approval_ttl",
)


@dataclass(frozen=True)
class Policy:
    """The rails; times are seconds."""

    fixed_kinds: frozenset[str] = frozenset({"cuda_oom_runtime"})
    how: How = "auto"
    cooldown_s: float = 3600.0
    cap_per_day: int = 2
    healthy_period_s: float = 6 * 3600.0
    concurrency: int = 1
    breaker_percentage: float | None = 50.0
    breaker_count: int | None = None
    breaker_window_s: float = 300.0
    lookback_s: float = 3600.0
    fold_window_s: float = 600.0
    approval: bool = False
    approval_ttl_s: float = 3600.0

    @property
    def breaker_keep_s(self) -> float:
        """How long a crash stays in the breaker's count (and its key remembered, so that it is never counted
        twice): twice the longer of the lookback and the window."""
        return 2 * max(self.lookback_s, self.breaker_window_s)


def parse_duration(text: object, what: str = "duration") -> float:
    """``15s``, ``5m``, ``1h``, ``1d``, ``250ms`` or a number of seconds → seconds (> 0)."""
    if isinstance(text, bool):
        raise ConfigError(f"{what} must be a duration like 15s, 5m, 1h, not a boolean")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(str(text))
        if not match:
            raise ConfigError(f"{what} {text!r} is not a duration (like 15s, 5m, 1h, 1d)")
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ConfigError(f"{what} {text!r} must be > 0")
    return seconds


def parse_policy(data: Any, *, source: str | None = None, lines: Mapping[str, int] | None = None) -> Policy:
    """A loaded policy mapping → Policy; ``lines`` maps top-level keys (and ``fix.kinds`` style paths) to lines."""
    if data is None:
        return Policy()
    where = _Where(source, lines or {})
    if not isinstance(data, Mapping):
        raise where.error("", "a policy is a mapping (fix:, cooldown:, breaker: …)")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _TOP:
            raise where.error(str(key), f"unknown key {key!r} (allowed: {', '.join(_TOP)})")
        if key == "fix":
            values.update(_fix(value, where))
        elif key == "breaker":
            values.update(_breaker(value, where))
        elif key in ("cooldown", "healthy_period", "lookback", "fold_window", "approval_ttl"):
            values[f"{key}_s"] = where.wrap(key, parse_duration, value, key)
        elif key in ("cap_per_day", "concurrency"):
            values[key] = _positive_int(value, key, where)
        else:  # approval
            if not isinstance(value, bool):
                raise where.error(key, f"approval must be true or false, got {value!r}")
            values[key] = value
    return Policy(**values)


class _Where:
    def __init__(self, source: str | None, lines: Mapping[str, int]) -> None:
        self.source, self.lines = source, lines

    def error(self, key: str, message: str) -> ConfigError:
        line = self.lines.get(key) or self.lines.get(key.split(".")[0])
        return ConfigError(f"line {line}: {message}" if line else message, source=self.source)

    def wrap(self, key: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except ConfigError as exc:
            raise self.error(key, exc.message) from None


def _positive_int(value: Any, key: str, where: _Where) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise where.error(key, f"{key} must be an integer ≥ 1, got {value!r}")
    return value


def _fix(value: Any, where: _Where) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error("fix", "fix must be a mapping (kinds:, how:)")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "kinds":
            if not isinstance(item, list) or not all(isinstance(k, str) for k in item):
                raise where.error("fix.kinds", "fix.kinds must be a list of finding kinds")
            for kind in item:
                if kind not in KINDS:
                    raise where.error("fix.kinds", f"fix.kinds: unknown kind {kind!r} (known: {', '.join(KINDS)})")
                if kind in NEVER_FIXED:
                    raise where.error(
                        "fix.kinds",
                        f"fix.kinds: {kind} is never fixed automatically (its fix raises the fraction or is none)",
                    )
            out["fixed_kinds"] = frozenset(item)
        elif key == "how":
            if item not in ("auto", "recipe"):
                raise where.error("fix.how", f"fix.how must be auto or recipe, got {item!r}")
            out["how"] = item
        else:
            raise where.error(f"fix.{key}", f"unknown key {key!r} in fix (allowed: kinds, how)")
    return out


def _breaker(value: Any, where: _Where) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error("breaker", "breaker must be a mapping (percentage:, count:, window:)")
    out: dict[str, Any] = {}
    if "count" in value and "percentage" not in value:
        out["breaker_percentage"] = None  # a count alone replaces the default percentage
    for key, item in value.items():
        if key == "percentage":
            if isinstance(item, bool) or not isinstance(item, int | float) or not 0 < item < 100:
                raise where.error("breaker.percentage", f"breaker.percentage must be in (0, 100), got {item!r}")
            out["breaker_percentage"] = float(item)
        elif key == "count":
            out["breaker_count"] = _positive_int(item, "breaker.count", where)
        elif key == "window":
            out["breaker_window_s"] = where.wrap("breaker.window", parse_duration, item, "breaker.window")
        else:
            raise where.error(f"breaker.{key}", f"unknown key {key!r} in breaker (allowed: percentage, count, window)")
    return out
