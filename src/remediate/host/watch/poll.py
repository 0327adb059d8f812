"""The watcher on one host: one bounded round trip per poll (``systemctl show`` + the journal since the
cursor), read-only. A host that cannot be read is ``unreachable`` (None), never crashed; a unit systemd does
not know (``LoadState=not-found``) is ``UnitMissing``, never polled as an ``inactive`` one. With no unit named,
the host's engine units are found once, as `oom` finds them (:func:`find_units`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from remediate.core.probe import parse_show
from remediate.core.watch.detect import JOURNAL_MARK, Poll, parse_poll, poll_command
from remediate.errors import TransportError
from remediate.host.common.probe import probe
from remediate.transport.base import Transport

POLL_TIMEOUT_S = 15.0  # one poll's round trip, output included
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
