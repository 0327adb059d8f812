"""The watcher on one host: one bounded round trip per poll (``systemctl show`` + the journal since the
cursor), read-only. A host that cannot be read is ``unreachable`` (None), never crashed; a unit systemd does
not know (``LoadState=not-found``) is ``UnitMissing``, never polled as an ``inactive`` one. With no unit named,
the host's engine units are found once, as `oom` finds them (:func:`find_units`).

A crash told by the engine's own fatal line (core/watch/fatal.py) is confirmed by :func:`server_silent` (the
health endpoint silent within a short bound) and, once the watcher acts, the lingering process is ended by
:func:`end_lingering` (a stop job, its SIGTERM then a SIGKILL: sglang ≥ 0.5.23's crash handler holds the
event loop and never drains).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from remediate.core.probe import parse_show
from remediate.core.watch.detect import JOURNAL_MARK, Poll, parse_poll, poll_command
from remediate.errors import RemediateError, TransportError
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import endpoint_of, engine_of, probe
from remediate.transport.base import Transport

POLL_TIMEOUT_S = 15.0  # one poll's round trip, output included
SILENT_S = 1.0  # the health endpoint's bound when a fatal line was read: a live server answers /health in ms
END_WAIT_S = 20.0  # the lingering process's end: the stop job queued, SIGKILL once it is deactivating
# systemd's unit_load_state_to_string() (src/basic/unit-def.c): the states of a unit it has no file for.
MISSING_LOAD_STATES = frozenset({"not-found"})
_LOAD_MARK = "@@load"


@dataclass(frozen=True)
class UnitMissing:
    """The unit polled does not exist on the host (systemd's ``LoadState``)."""

    unit: str
    load_state: str


@dataclass(frozen=True)
class FoundUnits:
    """A host's engine units found by detection, or why none is watched (``reason``)."""

    units: tuple[str, ...]
    reason: str | None = None


def poll_unit(
    transport: Transport, unit: str, cursor: str | None, since_epoch: float | None
) -> Poll | UnitMissing | None:
    """The unit's state and its journal after ``cursor`` (else since ``since_epoch``); None: unreachable."""
    load = f"systemctl show {shlex.quote(unit)} -p LoadState 2>/dev/null; echo {_LOAD_MARK}; "
    try:
        result = transport.run(load + poll_command(unit, cursor, since_epoch), timeout=POLL_TIMEOUT_S)
    except TransportError:
        return None
    head, mark, rest = result.stdout.partition(f"{_LOAD_MARK}\n")
    if not mark:  # an answer without the mark (a scripted host): the poll is all of it
        rest = result.stdout
    else:
        state = parse_show(head).get("LoadState", "")
        if state in MISSING_LOAD_STATES and JOURNAL_MARK in rest:
            return UnitMissing(unit, state)
    poll = parse_poll(rest, unit)
    return poll if poll.observation is not None else None


def find_units(transport: Transport, named: str | None) -> FoundUnits:
    """The engine units to watch on the host: ``named`` as it is, else those `oom` would find — every unit
    file whose ``ExecStart=`` runs sglang or vLLM, a template's loaded instances in its place
    (templates/probe.sh.j2, one bounded round trip). A template with no instance cannot be watched."""
    if named:
        return FoundUnits((named,))
    found = probe(transport, None).candidates
    units = tuple(u for u in found if not u.endswith("@.service"))
    if units:
        return FoundUnits(units)
    if found:
        return FoundUnits((), f"only the template(s) {', '.join(found)}, with no instance loaded: pass --unit")
    return FoundUnits((), "no systemd unit runs sglang or vLLM (no ExecStart= names them): pass --unit")


def server_silent(transport: Transport, unit: str, server_port: int | None, bound: float = SILENT_S) -> str | None:
    """Why the unit's server is taken for dead (its health endpoint not answering 200 within ``bound``,
    total), else None: it answered, so a fatal line is not believed. The endpoint is the unit's own
    (``--host``/``--port`` as `oom` reads them); a host that cannot be read is not a confirmation."""
    try:
        found = probe(transport, unit)
        if found.state is None:
            return None
        endpoint = endpoint_of(found, RunOptions(unit=unit, server_port=server_port))
        path = engine_of(found).health_path
        answer = transport.http_get(*endpoint, path, timeout=bound)
    except RemediateError:
        return None
    if answer.status == 200:
        return None
    if answer.status is None:
        return f"{path} silent for {bound:g}s ({answer.error or 'no answer'})"
    return f"{path} answered {answer.status}"


def end_lingering(transport: Transport, unit: str, invocation: str, timeout: float = END_WAIT_S) -> str:
    """End the unit's ``invocation`` when it still runs (a crashed server lingering in its crash handler): a
    stop job (systemd logs ``Stopping …`` first, so the exit that follows is a planned one, never a second
    crash), then, once it is deactivating, SIGKILL to every process of the unit (the handler ignores SIGTERM:
    its drain is an event-loop task the handler blocks). What it found: ``ended``, ``not_running`` (another
    invocation, or stopped already: nothing done), ``lingers`` (still there after ``timeout``)."""
    quoted = shlex.quote(unit)
    script = (
        f"u={quoted}; want={shlex.quote(invocation)}; "
        'show() { systemctl show "$u" -p "$1" --value 2>/dev/null; }; '
        '[ "$(show InvocationID)" = "$want" ] && [ "$(show ActiveState)" = active ] '
        "|| { echo @@not_running; exit 0; }; "
        'systemctl stop --no-block "$u"; '
        f"for i in $(seq 1 {int(timeout * 10)}); do "
        "s=$(show ActiveState); "
        'case "$s" in inactive|failed) echo @@ended; exit 0;; '
        'deactivating) systemctl kill --signal=SIGKILL "$u" 2>/dev/null;; esac; '
        "sleep 0.1; done; echo @@lingers"
    )
    try:
        result = transport.run(script, timeout=timeout + POLL_TIMEOUT_S)
    except TransportError:
        return "lingers"
    for word in ("ended", "not_running", "lingers"):
        if f"@@{word}" in result.stdout:
            return word
    return "lingers"
