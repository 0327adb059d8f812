"""The followed journal, pure: the command that follows a unit's journal on one long-lived channel, and
which of its lines are systemd telling us something (they wake the host's poll at once).

systemd writes its own lines about a unit (``Main process exited, code=…``, ``Failed with result …``,
``Scheduled restart job``, ``Stopping …``, ``Started …``) from PID 1 with the unit's ``UNIT=`` field, which
``journalctl -u UNIT`` matches (systemd's ``unit_log_*`` in src/core/unit.c, ``service_sigchld_event`` in
src/core/service.c). Only those wake the poll, told by journald's trusted ``_PID`` (core/watch/detect.py
``parse_entry``): the server's own lines — every request it serves, whatever their text or their
``SYSLOG_IDENTIFIER`` — do not wake anything: a healthy, busy server costs a parse per line, no round trip.
The one exception is the engine's own fatal line where a message starts (core/watch/fatal.py): it wakes the
poll, which then asks the server's health endpoint — a wake-up, never a crash on its own.
"""

from __future__ import annotations

import json
import shlex

from remediate.core.watch.detect import MAX_LINE_CHARS, parse_entry
from remediate.core.watch.fatal import is_fatal_entry

FOLLOWING = "@@following"
MAX_LINES_PER_S = 2000  # lines parsed per host per second; past it the host is polled instead (a flood)


def follow_command(unit: str) -> str:
    """``journalctl -f`` of the unit from now on (the poll reads what came before, after its cursor); it
    ends when the channel's stdin closes (the watcher let go, the connection died) or journalctl exits."""
    quoted = shlex.quote(unit)
    return (
        f"journalctl -u {quoted} -f -n 0 -o json --no-pager </dev/null 2>/dev/null & f=$!; "
        f"(cat >/dev/null; kill $f 2>/dev/null) <&0 & echo {FOLLOWING}; wait $f"
    )


def is_told(line: bytes, unit: str) -> bool:
    """Whether a followed line is systemd's (PID 1's) about the unit (the host's state changed), or the
    engine's fatal line (a crash to confirm). Anything else — the server's output whatever else it says, a
    marker, a cut or unparsable line, binary — is not."""
    if not line.startswith(b"{"):
        return False
    try:
        doc = json.loads(line[: MAX_LINE_CHARS * 4])
    except ValueError:  # a line cut at the transport's bound, or not JSON at all
        return False
    if not isinstance(doc, dict):
        return False
    entry = parse_entry(doc, unit)
    return entry is not None and (entry.is_systemd or is_fatal_entry(entry))
