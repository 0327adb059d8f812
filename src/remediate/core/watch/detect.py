"""One poll of one unit, taken apart: the ``systemctl show`` state and the journal since the cursor
(``journalctl -o json``), and whether they show a new crash.

A crash is an exit systemd did not ask for: the unit failed or waiting to auto-restart; NRestarts grew; the
invocation changed while the old one's main process exited non-zero (systemd's own ``Main process exited …
status=N`` line in the unit's journal, ``Failed with result``). A unit that crashed and was already restarted by
its own ``Restart=`` is still a crash: NRestarts and the journal say so (systemd's ``service_enter_restart``).

An exit that follows a stop job is not a crash, whoever asked for the job (this watcher's fix, a person's
``systemctl stop``/``restart``, a deploy tool): systemd logs ``Stopping <unit>...`` for the invocation it stops
before the main process dies (src/core/job.c ``job_emit_start_message``: ``JOB_TYPE=stop`` — a restart job's
stop half is run and logged as a stop, ``job_perform_on_unit`` —, ``MESSAGE_ID`` UNIT_STOPPING, the unit's
``INVOCATION_ID``). sglang before 0.5.23 ends every graceful stop by SIGKILLing itself, so its planned stops
read ``code=killed, status=9/KILL`` / ``Failed with result 'signal'`` and, after ``systemctl stop``, a unit
left ``failed``: those are not crashes when that invocation's stop job came first. The auto-restart after a
crash is a restart job too, but its stop half has nothing to stop (``service_stop`` in ``auto-restart``
returns 0): no ``Stopping`` line, and its ``Stopped`` line comes after the exit. The stop job's line may be in
an earlier poll than the exit's (a cursor between them, a watcher restarted between them): every poll also
reads the unit's last few stop-job lines (``STOPS_READ``), so the order is judged on the host's journal, not
on what one poll happened to read.

Only systemd's own words count: an entry is systemd's when journald's trusted ``_PID`` field (set by journald
from the sender's credentials; a client cannot set underscore fields) says PID 1 wrote it, about this unit
(``UNIT=``, as ``log_unit_struct`` writes it; systemd's own lines are ``_SYSTEMD_UNIT=init.scope``). The
server's output (its ``_PID`` is the server's) may quote ``Main process exited, code=killed`` or set
``SYSLOG_IDENTIFIER=systemd``: it is evidence for diagnosis only, never a crash.

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
STOPS_MARK = "@@stops"
STOPS_READ = 8  # the unit's last stop-job lines read by every poll (one per planned stop; newest last)
# systemd's sd-messages.h: SD_MESSAGE_UNIT_STOPPING, the "Stopping <unit>..." line of a stop job
UNIT_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
_UNIT_SUFFIXES = (".service", ".socket", ".target", ".scope", ".slice", ".mount", ".timer", ".path", ".swap")
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
    is_systemd: bool = False  # PID 1 wrote it about this unit (journald's trusted ``_PID``, and ``UNIT=``)
    is_stop_job: bool = False  # systemd's "Stopping <unit>..." (a stop or restart job ran on the invocation)

    @property
    def order(self) -> tuple[str, int, float]:
        """Where the entry sits in the host's journal: its cursor's sequence number (``s=…;i=…``, hex),
        which orders entries of one journal exactly; else its time."""
        fields = dict(part.partition("=")[::2] for part in self.cursor.split(";"))
        try:
            return (fields.get("s", ""), int(fields.get("i", ""), 16), self.at)
        except ValueError:
            return ("", 0, self.at)


@dataclass(frozen=True)
class Poll:
    """One round trip's answer: the state (None when the host did not say: unreadable) and new entries."""

    observation: Observation | None
    entries: tuple[JournalEntry, ...]
    stops: tuple[JournalEntry, ...] = ()  # systemd's last stop-job lines of the unit, whatever the cursor

    @property
    def cursor(self) -> str | None:
        return self.entries[-1].cursor if self.entries else None


def unit_id(unit: str) -> str:
    """The unit's full name, as systemd writes it in ``UNIT=`` (``journalctl -u sglang`` means sglang.service)."""
    return unit if unit.endswith(_UNIT_SUFFIXES) else f"{unit}.service"


def poll_command(unit: str, cursor: str | None, since_epoch: float | None) -> str:
    """The one round trip: ``systemctl show`` of the unit, then its journal after the cursor (or since), then
    PID 1's last stop-job lines about it (journalctl ANDs matches on different fields)."""
    quoted = shlex.quote(unit)
    stops = f"_PID=1 {shlex.quote('UNIT=' + unit_id(unit))} MESSAGE_ID={UNIT_STOPPING}"
    if cursor:
        where = f"--after-cursor {shlex.quote(cursor)}"
    elif since_epoch is not None:
        where = f"--since @{int(since_epoch)}"
    else:
        where = ""
    return (
        f"systemctl show {quoted} -p {SHOW_PROPS} 2>/dev/null; echo {JOURNAL_MARK}; "
        f"journalctl -u {quoted} -o json --no-pager -n {MAX_JOURNAL_LINES} {where} 2>/dev/null; "
        f"echo {STOPS_MARK}; journalctl {stops} -o json --no-pager -n {STOPS_READ} 2>/dev/null"
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


def parse_entry(doc: Mapping[str, object], unit: str) -> JournalEntry | None:
    """One ``journalctl -o json`` object → JournalEntry (None: not an entry). ``is_systemd`` only where the
    trusted ``_PID`` says PID 1 and ``UNIT=`` names this unit: ``SYSLOG_IDENTIFIER``, ``_COMM`` spoofing aside,
    any client may write any other field."""
    cursor = doc.get("__CURSOR")
    if not isinstance(cursor, str):
        return None
    stamp = str(doc.get("__REALTIME_TIMESTAMP", "0"))
    at = int(stamp) / 1e6 if stamp.isdigit() else 0.0
    is_systemd = doc.get("_PID") == "1" and doc.get("UNIT") == unit_id(unit)
    # PID 1 names the unit's invocation in INVOCATION_ID (LOG_UNIT_INVOCATION_ID); its own cgroup's would be
    # init.scope's. The server's lines carry their unit's in the trusted _SYSTEMD_INVOCATION_ID.
    if is_systemd:
        invocation = doc.get("INVOCATION_ID") or ""
    else:
        invocation = doc.get("_SYSTEMD_INVOCATION_ID") or doc.get("INVOCATION_ID") or ""
    is_stop = is_systemd and doc.get("MESSAGE_ID") == UNIT_STOPPING and doc.get("JOB_TYPE") in ("stop", "restart")
    return JournalEntry(cursor, at, message_text(doc.get("MESSAGE")), str(invocation), is_systemd, is_stop)


def _entries(text: str, unit: str, limit: int) -> tuple[JournalEntry, ...]:
    entries = []
    for line in text.split("\n")[: limit + 1]:
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line[: MAX_LINE_CHARS * 4])
        except ValueError:
            continue
        entry = parse_entry(doc, unit) if isinstance(doc, dict) else None
        if entry is not None:
            entries.append(entry)
    return tuple(entries)


def parse_poll(text: str, unit: str) -> Poll:
    """The poll command's output → Poll; lines that are not journal JSON are skipped."""
    show, mark, rest = text.partition(f"{JOURNAL_MARK}\n")
    if not mark:
        show, rest = text.replace(JOURNAL_MARK, ""), ""
    journal, _, stops = rest.partition(f"{STOPS_MARK}\n")
    return Poll(
        parse_observation(parse_show(show)),
        _entries(journal, unit, MAX_JOURNAL_LINES),
        tuple(e for e in _entries(stops, unit, STOPS_READ) if e.is_stop_job),
    )


def exit_lines(entries: tuple[JournalEntry, ...]) -> tuple[JournalEntry, ...]:
    """systemd's lines (PID 1's, trusted) that say the main process died badly (non-zero exit, signal, failed
    result); a planned stop's among them (see ``crash_exits``)."""
    found = []
    for entry in entries:
        if not entry.is_systemd:
            continue
        exited = _EXITED.search(entry.message)
        failed = _FAILED.search(entry.message)
        if (exited and (exited.group(1) != "exited" or exited.group(2) != "0")) or (
            failed and failed.group(1) != "success"
        ):
            found.append(entry)
    return tuple(found)


def is_stopped(invocation: str, poll: Poll, before: JournalEntry | None = None) -> bool:
    """Whether systemd ran a stop job on ``invocation`` (before ``before``, an exit line of it): its exit
    was asked for."""
    if not invocation:
        return False
    jobs = {e.cursor: e for e in (*poll.stops, *(e for e in poll.entries if e.is_stop_job))}.values()
    return any(j.invocation == invocation and (before is None or _precedes(j, before)) for j in jobs)


def _precedes(a: JournalEntry, b: JournalEntry) -> bool:
    (seq_a, i_a, at_a), (seq_b, i_b, at_b) = a.order, b.order
    return i_a < i_b if seq_a and seq_a == seq_b else at_a <= at_b


def crash_exits(poll: Poll) -> tuple[JournalEntry, ...]:
    """The exit lines of crashes: systemd's exit lines less those of an invocation it was stopping."""
    return tuple(e for e in exit_lines(poll.entries) if not is_stopped(e.invocation, poll, e))


def is_planned_down(now: Observation, poll: Poll) -> bool:
    """A unit left ``failed`` by a stop systemd ran (sglang < 0.5.23 SIGKILLs itself: Result=signal)."""
    return now.active == "failed" and now.sub != "auto-restart" and is_stopped(now.invocation, poll)


def crash_reason(previous: Observation | None, poll: Poll) -> str | None:
    """Why this poll shows a new crash, or None (an unreadable host is never a crash)."""
    now = poll.observation
    if now is None:
        return None
    died = crash_exits(poll)
    if now.is_down and not is_planned_down(now, poll) and (previous is None or not previous.is_down or died):
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
    for entry in crash_exits(poll):
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
