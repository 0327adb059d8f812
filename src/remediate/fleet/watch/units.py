"""The units a watcher watches on a host with none named: found at the host's first connection as `oom`
finds them (host/watch.py ``find_units``), each watched as its own; a host with none — or a named unit systemd
does not know — is named in one line and looked at again later, backing off, never polled as a unit that
does not exist."""

from __future__ import annotations

from dataclasses import replace

from remediate.errors import TransportError
from remediate.fleet.watch.host import WatchedHost, WatcherView
from remediate.fleet.watch.host import host_key as host_key  # re-exported: rails.py, recover.py
from remediate.host.watch.poll import find_units


def fixing(w: WatcherView, host: str) -> bool:
    """A fix runs on one of the host's units: never two transactions on one host, none of its units polled."""
    return any(key.split(" ", 1)[0] == host for key in w._running)


MAX_BACKOFF_S = 300.0  # an unreachable host's (or one with no unit's) next look, doubling up to this
NO_UNIT_BACKOFF_S = 30.0  # a host with no unit to watch is looked at again after this, doubling up to the cap


def discover(w: WatcherView, now: float) -> None:
    """Each host with no unit named, at its first connection: its engine units (the ExecStart of every unit
    file, sglang or vLLM; a template's loaded instances), each then watched as its own unit."""
    for h in [h for h in w._hosts.values() if not h.unit]:
        if now < h.retry_at or fixing(w, h.entry.name):
            continue
        if h.transport is None:
            h.transport = w.connect(h.entry)
        try:
            found = find_units(h.transport, None)
        except TransportError:  # unreachable: as a poll that cannot read the host (reconnect, back off)
            h.transport.close()
            h.transport = None
            h.failures += 1
            h.retry_at = now + min(MAX_BACKOFF_S, 2.0**h.failures)
            if h.state != "unreachable":
                w.event("unreachable", now, host=h.entry.name, unit=None, retry_in=h.retry_at - now)
            h.state = "unreachable"
            continue
        if not found.units:
            no_unit(w, h, now, found.reason or "no engine unit found")
            continue
        if h.no_unit is not None:  # said when a host said to have none has some now (else silent, as a poll)
            w.event("units_found", now, host=h.entry.name, units=list(found.units))
        del w._hosts[h.key]
        for i, unit in enumerate(found.units):
            entry = replace(h.entry, settings={**h.entry.settings, "unit": unit})
            one = WatchedHost(entry, unit, transport=h.transport if i == 0 else None)  # the first keeps the connection
            w._hosts[one.key] = one


def no_unit(w: WatcherView, h: WatchedHost, now: float, reason: str) -> None:
    """No unit to watch on the host: said once per reason (audit ``no_unit``, one line to ``warn``), the host
    looked at again later (backing off), its state ``no_unit`` in `watch status`."""
    h.failures += 1
    h.retry_at = now + min(MAX_BACKOFF_S, NO_UNIT_BACKOFF_S * 2.0 ** (h.failures - 1))
    h.previous = None
    if h.no_unit != reason:
        w.event("no_unit", now, host=h.entry.name, unit=h.unit or None, reason=reason, retry_in=h.retry_at - now)
        if w.warn is not None:
            w.warn(f"{h.entry.name}: nothing watched: {reason}")
    h.no_unit, h.state = reason, "no_unit"


def unit_back(w: WatcherView, h: WatchedHost, now: float) -> None:
    """A unit said missing answers again (a person installed it): watched as any other from now on."""
    if h.no_unit is not None:
        h.no_unit, h.state = None, "unknown"
        w.event("units_found", now, host=h.entry.name, units=[h.unit])
