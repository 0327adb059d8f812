"""The watcher on one host: one bounded round trip per poll (``systemctl show`` + the journal since the
cursor), read-only. A host that cannot be read is ``unreachable`` (None), never crashed.
"""

from __future__ import annotations

from remediate.core.watch.detect import Poll, parse_poll, poll_command
from remediate.errors import TransportError
from remediate.transport.base import Transport

POLL_TIMEOUT_S = 15.0  # one poll's round trip, output included


def poll_unit(transport: Transport, unit: str, cursor: str | None, since_epoch: float | None) -> Poll | None:
    """The unit's state and its journal after ``cursor`` (else since ``since_epoch``); None: unreachable."""
    try:
        result = transport.run(poll_command(unit, cursor, since_epoch), timeout=POLL_TIMEOUT_S)
    except TransportError:
        return None
    poll = parse_poll(result.stdout, unit)
    return poll if poll.observation is not None else None
