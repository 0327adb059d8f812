"""One poll of one unit, taken apart: the ``systemctl show`` state and the journal since the cursor
(``journalctl -o json``), and whether they show a new crash.

A crash is: the unit failed or waiting to auto-restart; NRestarts grew; the invocation changed while
the old one's main process exited non-zero (systemd's own ``Main process exited … status=N`` line in the
unit's journal, ``Failed with result``). A unit that crashed and was already restarted by its own
``Restart=`` is still a crash: NRestarts and the journal say so (systemd's ``service_enter_restart``).

Each crash has a time and a key (``crash_times``): the crashed invocation's exit line's
``__REALTIME_TIMESTAMP`` and its ``INVOCATION_ID`` (systemd's ``unit_log_*`` lines carry the unit's
invocation id, src/core/unit.c), so that the breaker counts a crash once, at its own time, however many
rounds or watchers see it.
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
FUTURE_SKEW_S = 2.0  # a crash time this far past the poll's own time is the host's clock, not the crash
SAME_EXIT_S = 1.0  # exit lines without an invocation id this close together are one crash's
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


@dataclass(frozen=True)
class CrashTime:
    """One crash as the breaker counts it: ``key`` names it across rounds and watchers (the crashed
    invocation's id, else its exit time, else its detection time); ``at`` is its exit's time on the host's
    clock, bounded; ``clamped`` says why ``at`` is the detection time instead."""

    key: str
    at: float
    clamped: str | None = None

    def audit(self, is_new: bool) -> dict[str, object]:
        """As the audit's ``detected`` event says it (``new``: counted now, not by an earlier round)."""
        return {"key": self.key, "at": self.at, "new": is_new} | ({"clamped": self.clamped} if self.clamped else {})


def crash_times(previous: Observation | None, poll: Poll, seen_at: float, far_past_s: float) -> tuple[CrashTime, ...]:
    """The crashes a poll that found one shows, each once: every crashed invocation whose exit line it read
    (systemd writes two or three for one crash: exited, failed, restart scheduled), else the invocation the
    state names (a unit in auto-restart or failed is still on the crashed invocation; after a restart it is
    the previous one). A time past ``seen_at`` (the host's clock ahead) or more than ``far_past_s`` before it
    (behind, or never stamped) is clamped to ``seen_at``."""
    found: list[tuple[str, float]] = []
    for entry in exit_lines(poll.entries):
        if entry.invocation:
            if all(key != entry.invocation for key, _ in found):
                found.append((entry.invocation, entry.at))
        elif not found or found[-1][0] != "" or entry.at - found[-1][1] > SAME_EXIT_S:
            found.append(("", entry.at))
    if not found:
        now = poll.observation
        crashed = ""
        if previous is not None and now is not None and now.invocation != previous.invocation:
            crashed = previous.invocation
        elif now is not None:
            crashed = now.invocation
        return (CrashTime(crashed or f"seen@{seen_at:.3f}", seen_at),)
    out = []
    for key, at in found:
        clamped = None
        if at > seen_at + FUTURE_SKEW_S:
            clamped = f"exit time {at:.3f} is {at - seen_at:.1f}s ahead of the poll (host clock?)"
        elif at < seen_at - far_past_s:
            clamped = f"exit time {at:.3f} is more than {far_past_s:g}s before the poll"
        out.append(CrashTime(key or f"exit@{at:.3f}", seen_at if clamped else at, clamped))
    return tuple(out)
