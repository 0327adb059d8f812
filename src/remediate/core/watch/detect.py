"""One poll of one unit, taken apart: the ``systemctl show`` state and the journal since the cursor
(``journalctl -o json``), and whether they show a new crash.

A crash is: the unit failed or waiting to auto-restart; NRestarts grew; the invocation changed while
the old one's main process exited non-zero (systemd's own ``Main process exited … status=N`` line in the
unit's journal, ``Failed with result``). A unit that crashed and was already restarted by its own
``Restart=`` is still a crash: NRestarts and the journal say so (systemd's ``service_enter_restart``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from remediate.core.probe import parse_show

SHOW_PROPS = "ActiveState,SubState,Result,NRestarts,InvocationID,ExecMainStatus,MainPID"
JOURNAL_MARK = "@@journal"
MAX_JOURNAL_LINES = 2000  # per poll: the answer stays bounded whatever the unit logged
MAX_LINE_CHARS = 16384
# systemd's service.c: "Main process exited, code=exited, status=1/FAILURE", "Failed with result 'exit-code'."
_EXITED = re.compile(r"Main process exited, code=(\w+), status=(\d+)")
_FAILED = re.compile(r"Failed with result '([\w-]+)'")


@dataclass(frozen=True)
class Observation:
    """The unit as ``systemctl show`` described it at one poll."""

    active: str
    sub: str
    result: str
    n_restarts: int
    invocation: str
    exec_status: int
    main_pid: int

    @property
    def is_down(self) -> bool:
        return self.active == "failed" or self.sub == "auto-restart"


@dataclass(frozen=True)
class JournalEntry:
    cursor: str
    at: float  # seconds since the epoch (__REALTIME_TIMESTAMP)
    message: str
    invocation: str = ""


@dataclass(frozen=True)
class Poll:
    """One round trip's answer: the state (None when the host did not say: unreadable) and new entries."""

    observation: Observation | None
    entries: tuple[JournalEntry, ...]

    @property
    def cursor(self) -> str | None:
        return self.entries[-1].cursor if self.entries else None


def poll_command(unit: str, cursor: str | None, since_epoch: float | None) -> str:
    """The one round trip: ``systemctl show`` of the unit, then its journal after the cursor (or since)."""
    quoted = shlex.quote(unit)
    if cursor:
        where = f"--after-cursor {shlex.quote(cursor)}"
    elif since_epoch is not None:
        where = f"--since @{int(since_epoch)}"
    else:
        where = ""
    return (
        f"systemctl show {quoted} -p {SHOW_PROPS} 2>/dev/null; echo {JOURNAL_MARK}; "
        f"journalctl -u {quoted} -o json --no-pager -n {MAX_JOURNAL_LINES} {where} 2>/dev/null".rstrip()
    )


def parse_observation(props: Mapping[str, str]) -> Observation | None:
    if not props.get("ActiveState"):
        return None

    def number(key: str) -> int:
        value = props.get(key, "")
        return int(value) if value.isdigit() else 0

    return Observation(
        props["ActiveState"],
        props.get("SubState", ""),
        props.get("Result", ""),
        number("NRestarts"),
        props.get("InvocationID", ""),
        number("ExecMainStatus"),
        number("MainPID"),
    )


def message_text(value: object) -> str:
    if isinstance(value, str):
        return value[:MAX_LINE_CHARS]
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value[:MAX_LINE_CHARS]).decode("utf-8", "replace")  # journald's binary MESSAGE
    return ""


def parse_poll(text: str) -> Poll:
    """The poll command's output → Poll; lines that are not journal JSON are skipped."""
    show, mark, journal = text.partition(f"{JOURNAL_MARK}\n")
    if not mark:
        show, journal = text.replace(JOURNAL_MARK, ""), ""
    entries = []
    for line in journal.split("\n")[: MAX_JOURNAL_LINES + 1]:
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line[: MAX_LINE_CHARS * 4])
        except ValueError:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("__CURSOR"), str):
            continue
        stamp = str(doc.get("__REALTIME_TIMESTAMP", "0"))
        at = int(stamp) / 1e6 if stamp.isdigit() else 0.0
        invocation = doc.get("_SYSTEMD_INVOCATION_ID") or doc.get("INVOCATION_ID") or ""
        entries.append(JournalEntry(doc["__CURSOR"], at, message_text(doc.get("MESSAGE")), str(invocation)))
    return Poll(parse_observation(parse_show(show)), tuple(entries))


def exit_lines(entries: tuple[JournalEntry, ...]) -> tuple[JournalEntry, ...]:
    """systemd's lines that say the main process died badly (non-zero exit, signal, failed result)."""
    found = []
    for entry in entries:
        exited = _EXITED.search(entry.message)
        failed = _FAILED.search(entry.message)
        if (exited and (exited.group(1) != "exited" or exited.group(2) != "0")) or (
            failed and failed.group(1) != "success"
        ):
            found.append(entry)
    return tuple(found)


def crash_reason(previous: Observation | None, poll: Poll) -> str | None:
    """Why this poll shows a new crash, or None (an unreadable host is never a crash)."""
    now = poll.observation
    if now is None:
        return None
    died = exit_lines(poll.entries)
    if now.is_down and (previous is None or not previous.is_down or died):
        return f"unit {now.active}/{now.sub} (result {now.result or '?'})"
    if previous is not None and now.n_restarts > previous.n_restarts:
        return f"NRestarts {previous.n_restarts} → {now.n_restarts}"
    if died:
        if previous is not None and now.invocation != previous.invocation:
            return f"invocation changed after: {died[-1].message}"
        return died[-1].message
    return None
