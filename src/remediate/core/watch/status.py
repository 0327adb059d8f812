"""What the on-call reads in the morning: each watched host's state, its last crash, its last fix (what it
changed, its backup, how long it took), when the next automatic fix is allowed, its open incidents and
pending approvals — built from the audit log's events and watch.db's rows at ``now`` (pure: both read by
the caller)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remediate.core.watch.incident import DAY_S, HostHistory, clamp_future, counted_fixes
from remediate.core.watch.policy import Policy

# The flags (as the outcome record names them) that hold the fraction and the chunk, by engine (sglang's
# server_args.py; vLLM's arg_utils.py), and the allocator environment the fix sets (PyTorch's CUDA caching
# allocator; its newer spelling).
FRACTION_FLAGS = ("mem_fraction_static", "gpu_memory_utilization")
CHUNK_FLAGS = ("chunked_prefill_size", "max_num_batched_tokens")
ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


@dataclass(frozen=True)
class HostRows:
    """watch.db's rows of one host: its history, its open incidents, its pending approvals."""

    history: HostHistory
    incidents: tuple[dict[str, Any], ...] = ()  # open ones: id, unit, opened_at, last_at, crashes, outcome
    approvals: tuple[dict[str, Any], ...] = ()  # pending: id, incident, created_at, expires_at


def host_status(
    host: str, units: tuple[str, ...], state: str, events: list[dict[str, Any]], rows: HostRows,
    policy: Policy, now: float,
) -> dict[str, Any]:  # fmt: skip
    """One watched host as ``watch status`` shows it; ``events``: the audit log's, oldest first (any host)."""
    mine = [e for e in events if e.get("host") == host]
    fixes = rows.history.fixes
    next_fix = next_fix_allowed(rows.history, policy, now)
    if state == "cooling_down" and next_fix["why"] != "cooldown":  # the cooldown ended: healthy since
        state = "healthy"
    return {
        "host": host,
        "units": list(units),
        "state": state,
        "last_crash": _last_crash(mine),
        "last_fix": _last_fix(mine),
        "fixes_24h": counted_fixes(clamp_future(rows.history, now)[0], now),
        "fixes": len(fixes),
        "next_fix": next_fix,
        "incidents": [{**i, "age_s": _age(now, i.get("opened_at"))} for i in rows.incidents],
        "approvals": [{**a, "age_s": _age(now, a.get("created_at"))} for a in rows.approvals],
    }


def next_fix_allowed(history: HostHistory, policy: Policy, now: float) -> dict[str, Any]:
    """When the rails next allow an automatic fix of the host (core/watch/decide.py's order: needs_human, the
    daily cap, the cooldown): ``at`` None for now (or never without a person: ``why`` needs_human)."""
    history, _ = clamp_future(history, now)
    if history.is_needs_human:
        return {"at": None, "why": "needs_human", "detail": "left to a person"}
    done = counted_fixes(history, now)
    if done >= policy.cap_per_day:
        start = max(now - DAY_S, history.count_from)
        counted = sorted(t for t in history.fixes if start <= t <= now)
        at = counted[done - policy.cap_per_day] + DAY_S  # the oldest fix over the cap leaves the 24h window
        return {"at": at, "why": "cap", "detail": f"{done} fixes in 24h (cap {policy.cap_per_day})"}
    recent = [t for t in history.fixes if 0 <= now - t < policy.cooldown_s]
    if recent:
        return {"at": max(recent) + policy.cooldown_s, "why": "cooldown", "detail": f"cooldown {policy.cooldown_s:g}s"}
    return {"at": None, "why": None, "detail": f"{done} of {policy.cap_per_day} fixes in 24h used"}


def _last_crash(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    detected = [e for e in events if e.get("event") == "detected"]
    if not detected:
        return None
    last = detected[-1]
    crashes = [c for c in last.get("crashes") or [] if isinstance(c, dict)]
    at = max((float(c["at"]) for c in crashes if isinstance(c.get("at"), int | float)), default=None)
    kinds: list[str] = []
    for e in events[events.index(last) :]:
        if e.get("event") == "diagnosed":
            kinds = [str(k) for k in e.get("kinds") or []]
            break
    return {"at": at if at is not None else last.get("at"), "unit": last.get("unit"), "kinds": kinds,
            "reason": last.get("reason")}  # fmt: skip


def _last_fix(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last fix that ended (its ``outcome`` record) with when it started (its ``acted`` record)."""
    outcomes = [e for e in events if e.get("event") == "outcome" and e.get("outcome") != "dry_run"]
    if not outcomes:
        return None
    end = outcomes[-1]
    incident = end.get("incident")
    acted = [e for e in events if e.get("event") == "acted" and e.get("incident") == incident]
    diagnosed = [e for e in events[: events.index(end)] if e.get("event") == "diagnosed"]
    started = acted[0].get("at") if acted else None
    units = end.get("units")
    change = next(iter(units.values())) if isinstance(units, dict) and units else end  # several: the first
    flags = _pair(change.get("flags"))
    env = _pair(change.get("env"))
    took = None if started is None else round(float(end["at"]) - float(started), 1)
    return {
        "at": started if started is not None else end.get("at"),
        "ended_at": end.get("at"),
        "took_s": took,
        "incident": incident,
        "unit": end.get("unit"),
        "outcome": end.get("outcome"),
        "fraction": _named(flags, FRACTION_FLAGS),
        "chunk": _named(flags, CHUNK_FLAGS),
        "alloc_conf": _named(env, ALLOC_ENV),
        "tokens": {"before": diagnosed[-1].get("tokens") if diagnosed else None, "after": change.get("tokens")},
        "backup": change.get("backup"),
        "error": end.get("error"),
    }


def _pair(value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(value, dict):
        return {}, {}
    before, after = value.get("before"), value.get("after")
    return (before if isinstance(before, dict) else {}), (after if isinstance(after, dict) else {})


def _named(pair: tuple[dict[str, Any], dict[str, Any]], names: tuple[str, ...]) -> dict[str, Any] | None:
    """{name, before, after} of the first of ``names`` the fix read or wrote; None when it touched none."""
    before, after = pair
    for name in names:
        if name in before or name in after:
            return {"name": name, "before": before.get(name), "after": after.get(name, before.get(name))}
    return None


def _age(now: float, at: Any) -> float | None:
    return round(now - float(at), 1) if isinstance(at, int | float) else None
