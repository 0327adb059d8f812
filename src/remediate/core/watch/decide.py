"""The decision: crash evidence + host history + fleet state → report, act, needs_human, wait_approval,
wait or breaker_open. Each rail is one step, in the order below; the first that holds decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from remediate.core.diagnosis.findings import KINDS
from remediate.core.watch.incident import HostHistory, counted_fixes
from remediate.core.watch.policy import Policy

Verdict = Literal["report", "act", "needs_human", "wait_approval", "wait", "breaker_open"]
# Companions that do not change what the fix is: a crash loop is the runtime OOM repeated.
_COMPANIONS = frozenset({"crash_loop"})


@dataclass(frozen=True)
class FleetView:
    """What the decision needs of the fleet: hosts watched, recent crashes, fixes in flight, switches."""

    watched: int
    crashes: tuple[tuple[str, float], ...] = ()  # (host, crash time) of each crash counted since a resume
    in_flight: int = 0
    breaker_reason: str | None = None  # set while the breaker is open (only a person closes it)
    is_paused: bool = False


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str


def breaker_crossing(fleet: FleetView, policy: Policy) -> tuple[float, str] | None:
    """When the breaker's threshold was first crossed by the crashes' own times, and why; None if never:
    more crashed hosts within one window than the policy allows (the percentage needs at least two crashed
    hosts: one host's crash is that host's). A crossing learned late (a watcher dead, a fix in flight) is a
    crossing all the same.

    Anchors: Cluster API MachineHealthCheck ``maxUnhealthy`` (past it, remediation stops: the cause is not
    the machines) and NVIDIA NVSentinel's fault-quarantine circuit breaker (``percentage``, ``duration``;
    reset by a person only).
    """
    ordered = sorted((t, h) for h, t in fleet.crashes)
    inside: dict[str, int] = {}
    first = 0
    window = f"{policy.breaker_window_s:g}s"
    for at, host in ordered:  # a window ending at each crash, oldest first: the first over the line wins
        inside[host] = inside.get(host, 0) + 1
        while ordered[first][0] < at - policy.breaker_window_s:
            gone = ordered[first][1]
            inside[gone] -= 1
            if not inside[gone]:
                del inside[gone]
            first += 1
        n = len(inside)
        if policy.breaker_count is not None and n > policy.breaker_count:
            return at, f"{n} hosts crashed within {window} (more than {policy.breaker_count})"
        pct = policy.breaker_percentage
        # One crashed host is never fleet-wide: with a fleet of 1 or 2 the percentage alone would trip on it.
        if pct is not None and n >= 2 and n * 100 > pct * fleet.watched:
            return at, f"{n} of {fleet.watched} hosts crashed within {window} (more than {pct:g}%)"
    return None


def breaker_trip(fleet: FleetView, policy: Policy) -> str | None:
    """Why the breaker trips (its threshold was crossed by the crashes' times), or None."""
    crossed = breaker_crossing(fleet, policy)
    return None if crossed is None else crossed[1]


def fixable(kinds: tuple[str, ...], policy: Policy) -> str | None:
    """Why these findings are not fixed automatically, or None when they are."""
    if not kinds:
        return "no finding: reported, never fixed"
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        return f"unknown finding {unknown[0]!r}: reported, never fixed"
    causes = [k for k in kinds if k not in _COMPANIONS]
    if not causes:
        return "only a crash loop, no cause found: reported"
    others = [k for k in causes if k not in policy.fixed_kinds]
    if others:
        return f"{others[0]} is not in the policy's fix.kinds: reported"
    return None


def decide(
    kinds: tuple[str, ...],
    history: HostHistory,
    fleet: FleetView,
    policy: Policy,
    now: float,
    *,
    approved: bool = False,
) -> Decision:
    """What to do about a host's crash at ``now``; ``approved`` when a person approved this very action.

    Rails, in order: the breaker (MachineHealthCheck maxUnhealthy / NVSentinel), pause, the policy's kinds
    (an unknown finding is reported, never fixed), needs_human and the daily cap (KubeadmControlPlane
    ``maxRetry``, reset after ``minHealthyPeriod``), the cooldown (Event-Driven Ansible ``once_within``),
    the fleet-wide concurrency (kured's lock), then approval (StackStorm ``core.ask``).
    """
    if fleet.breaker_reason:
        return Decision("breaker_open", f"breaker open: {fleet.breaker_reason}")
    tripped = breaker_trip(fleet, policy)
    if tripped:
        return Decision("breaker_open", f"breaker tripped: {tripped}")
    if fleet.is_paused:
        return Decision("report", "paused: reported, not fixed")
    why_not = fixable(kinds, policy)
    if why_not:
        return Decision("report", why_not)
    if history.is_needs_human:
        return Decision("needs_human", "host marked needs_human: left alone")
    done = counted_fixes(history, now)
    if done >= policy.cap_per_day:
        return Decision("needs_human", f"{done} automatic fixes in 24h (cap {policy.cap_per_day}): left to a person")
    recent = [t for t in history.fixes if 0 <= now - t < policy.cooldown_s]
    if recent:
        left = policy.cooldown_s - (now - max(recent))
        return Decision("report", f"cooling down ({left:.0f}s left of {policy.cooldown_s:g}s): reported, not fixed")
    if fleet.in_flight >= policy.concurrency:
        return Decision("wait", f"{fleet.in_flight} fix(es) in flight (concurrency {policy.concurrency})")
    if policy.approval and not approved:
        return Decision("wait_approval", "approval mode: waits for approve/deny")
    return Decision("act", f"{', '.join(kinds)}: fixed with the {policy.how} plan")
