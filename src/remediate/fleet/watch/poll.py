"""One host's poll in the watcher's round: its unit's state and journal since the saved cursor (one
connection kept per host, a follower waking it), a crash's reason and times, or the host unreachable
(backing off) or without its unit (fleet/watch/units.py)."""

from __future__ import annotations

import time

from remediate.core.watch.detect import CrashTime, Poll, crash_reason, crash_times
from remediate.core.watch.fatal import fatal_line
from remediate.core.watch.incident import note_healthy
from remediate.fleet.watch.follow import Follower
from remediate.fleet.watch.host import WatchedHost, WatcherView
from remediate.fleet.watch.units import MAX_BACKOFF_S, fixing, no_unit, unit_back
from remediate.host.watch.poll import UnitMissing, poll_unit

FOLLOWED_POLL_S = 300.0  # a followed host's safety poll (its journal wakes it at once otherwise)
RECHECK_S = 10.0  # a fatal line the server's health belied: that invocation's lines not checked again sooner
EARLY_KEPT = 16  # the invocations told by a fatal line remembered per unit (their late exits fold)


def poll(w: WatcherView, h: WatchedHost, now: float) -> str | None:
    """The host's poll; the reason of a new crash, else None."""
    w.alive()  # each step of a round is bounded (the connect timeout, POLL_TIMEOUT_S, the diagnosis's)
    if not h.unit or now < h.retry_at or fixing(w, h.entry.name):  # a host being fixed is not polled
        return None
    with w._wake:
        is_woken = h.key in w._woken
        w._woken.discard(h.key)
    # A followed host is polled when its journal says something, else only as a safety net.
    if h.follower is not None and h.follower.is_following and not is_woken and now - h.polled_at < FOLLOWED_POLL_S:
        return None
    h.polled_at = now
    if h.transport is None:
        h.transport = w.connect(h.entry)
    cursor = w.state.cursor(h.entry.name, h.unit)
    started = time.monotonic()
    seen = poll_unit(h.transport, h.unit, cursor, None if cursor else now - w.policy.lookback_s)
    if w.metrics is not None:
        w.metrics.poll.observe(time.monotonic() - started)
    if isinstance(seen, UnitMissing):  # never polled as a unit that does not exist (it would read inactive)
        no_unit(w, h, now, f"unit {h.unit} not found (LoadState={seen.load_state})")
        return None
    if seen is None:  # unreachable: never a crash; reconnect later, backing off (capped)
        if h.follower is not None:
            h.follower.ask_stop()
        h.transport.close()
        w._unfollow(h)
        h.transport = None
        h.failures += 1
        h.retry_at = now + min(MAX_BACKOFF_S, 2.0**h.failures)
        if h.state != "unreachable":
            w.event("unreachable", now, host=h.entry.name, unit=h.unit, retry_in=h.retry_at - now)
        h.state = "unreachable"
        return None
    h.failures = 0
    unit_back(w, h, now)
    if w.follow and h.follower is None:
        h.follower = Follower(h.transport, h.unit, h.key, w.woken)  # it wakes its unit (a host runs several)
        h.follower.start()
    reason = crash_reason(h.previous, seen)
    h.crashes = crash_times(h.previous, seen, max(now, time.time()), w.policy.lookback_s) if reason else ()
    if reason and all(c.key in h.early for c in h.crashes):  # the crash acted on at its fatal line, exiting now
        w.event("late_exit", now, host=h.entry.name, unit=h.unit, keys=[c.key for c in h.crashes], reason=reason)
        reason, h.crashes = None, ()
    if reason is None and (told := _told(w, h, seen, now)) is not None:
        reason, h.crashes = told
    if seen.observation is not None and seen.observation.invocation != h.lingering:
        h.lingering = None  # the crashed invocation ended (by its own kill, the fix's stop or a restart)
    h.previous = seen.observation
    h.crash_cursor = seen.cursor if reason else None
    with w.state.transaction():
        if seen.cursor and not reason:
            w.state.save_cursor(h.entry.name, h.unit, seen.cursor)
        history = w.state.history(h.entry.name)
        if reason is None:
            if seen.observation is not None and seen.observation.active == "active":
                w.state.save_history(h.entry.name, note_healthy(history, now))
                if h.state in ("unknown", "unreachable", "crashed"):
                    h.state = "healthy"
    return reason


def _told(w: WatcherView, h: WatchedHost, seen: Poll, now: float) -> tuple[str, tuple[CrashTime, ...]] | None:
    """A crash the engine's fatal line told (core/watch/fatal.py) while its unit still runs, confirmed by
    what the server cannot forge: its health endpoint silent (host/watch/poll.py ``server_silent``). A line alone
    (the server answered) is audited ``unconfirmed`` and starts nothing; that invocation's lines are looked at
    again only after ``RECHECK_S`` (a flood of forged lines costs one health check per 10 s)."""
    fatal = fatal_line(seen)
    if fatal is None or w.confirm is None or h.transport is None or fatal.invocation in h.early:
        return None
    if now - h.suspected_at.get(fatal.invocation, float("-inf")) < RECHECK_S:
        return None
    w.alive()
    silent = w.confirm(h.transport, h.entry, h.unit)
    if silent is None:
        h.suspected_at = {fatal.invocation: now}
        w.event("unconfirmed", now, host=h.entry.name, unit=h.unit, line=fatal.kind, why="the server answered")
        return None
    h.early = [*h.early, fatal.invocation][-EARLY_KEPT:]
    h.lingering = fatal.invocation
    at = fatal.at if now - w.policy.lookback_s <= fatal.at <= max(now, time.time()) + 2.0 else now
    return f"{fatal.kind} line of the running invocation; {silent}", (CrashTime(fatal.invocation, at),)
