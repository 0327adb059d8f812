"""PURE: a saved journal (what ``journalctl -u UNIT`` printed) → the lines the live read of a host yields.

A postmortem starts from a ticket's attachment: ``journalctl -u UNIT`` in its default format (``short``),
``-o short-iso``, ``short-precise``, ``short-iso-precise`` (``short-unix``, ``short-monotonic`` too),
``-o cat`` (messages only) or ``-o json`` (one object per line; ``json-seq`` and ``json-pretty`` too). The
format is told from the content, never from the file's name. The live ``diagnose`` reads
``journalctl -o short-iso`` (templates/probe.sh.j2) and the live ``plan`` reads ``journalctl -o cat``
(host/plan/budget.py ``read_journal``): :func:`parse_saved_journal` gives both, so that the same pure functions
(:func:`remediate.core.diagnosis.parse_journal`, :func:`remediate.core.startup.parse_startup`) see the same
lines.

- Text formats pass through line by line (core/logline.py takes the prefixes of every short* format apart);
  journalctl's own markers (``-- Boot ID --``, ``-- Reboot --``, ``-- No entries --``, ``-- Logs begin at …``,
  ``-- Journal begins at …``) are dropped: the live read runs with ``-q`` and never prints them.
- JSON entries are rendered as journalctl's ``output_short`` would print them in short-iso (systemd
  src/shared/logs-show.c): ``TIME HOST IDENT[PID]: MESSAGE``, the identifier ``SYSLOG_IDENTIFIER`` else
  ``_COMM``, the pid ``_PID`` else ``SYSLOG_PID``, the time ``__REALTIME_TIMESTAMP`` in UTC, the further lines of
  a multi-line message indented to the prefix's width (``print_multiline``), an entry without ``MESSAGE`` skipped.
  A ``MESSAGE`` that journalctl wrote as an array of bytes (not UTF-8) is decoded with U+FFFD for bad bytes
  (journalctl short would print ``[N B blob data]``: the text is the better evidence).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from remediate.core.logline import split_line
from remediate.core.startup import STARTUP_LINES_ERE

STARTUP_TAIL = 400
"""The startup memory lines the live ``plan`` keeps (``grep -E … | tail -n 400``, host/plan/budget.py)."""
PLAN_LINES = 5000
"""The messages the live ``plan`` reads for the crash (host/plan/budget.py ``JOURNAL_LINES``)."""

_MARKER = re.compile(r"^-- (?:Boot [0-9a-f]{32}|Reboot|No entries|(?:Logs|Journal) begins? at .*|Logs begin at .*) --$")
_STARTUP = re.compile(STARTUP_LINES_ERE)
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?P<frac>[.,]\d+)?")
_CLASSIC = re.compile(r"^[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d(?P<frac>\.\d+)?")
_UNIT_SAID = re.compile(
    r"^(?:(?:Start|Stopp)(?:ed|ing) (?P<unit>[\w@.:\\-]+\.service)(?: - |\.?$)|(?P<owner>[\w@.:\\-]+\.service): )"
)
_SYSTEM_IDENTS = frozenset({"systemd", "init"})
_SYSTEM_UNITS = frozenset({"init.scope"})


@dataclass(frozen=True)
class SavedJournal:
    """A saved journal, read: its format and the lines as each live read would have seen them."""

    format: str  # short, short-precise, short-iso(-precise), short-unix, short-monotonic, cat, json, or empty
    lines: tuple[str, ...]  # as ``journalctl -o short-iso`` (JSON) or as saved (text): what diagnose reads
    messages: tuple[str, ...]  # as ``journalctl -o cat``: what plan reads
    hosts: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    skipped: int = 0  # JSON lines that were not a journal entry
    markers: int = 0  # journalctl's ``-- … --`` lines dropped

    def plan_lines(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The live plan's two reads: the startup memory lines (the last 400) and the last 5000 messages."""
        startup = [m for m in self.messages if m.strip() and _STARTUP.search(m)]
        tail = [m for m in self.messages if m.strip()][-PLAN_LINES:]
        return tuple(startup[-STARTUP_TAIL:]), tuple(tail)


def parse_saved_journal(text: str) -> SavedJournal:
    """Detect the format of ``text`` and read it; never raises (a line not understood is kept as text, or,
    in JSON, counted in ``skipped``)."""
    raw = text.lstrip("\ufeff").splitlines()
    markers = sum(1 for line in raw if _MARKER.match(line.strip()))
    body = [line for line in raw if not _MARKER.match(line.strip())]
    first = next((line.strip().lstrip("\x1e") for line in body if line.strip()), None)
    if first is None:
        return SavedJournal("empty", (), (), markers=markers)
    if first.startswith("{"):
        return _from_json(body, markers)
    return _from_text(body, markers)


# ----------------------------------------------------------------------------------------------- text


def _text_format(lines: list[str]) -> str:
    for line in lines:
        parsed = split_line(0, line)
        if not parsed.ident:
            continue
        if match := _ISO.match(line):
            return "short-iso-precise" if match.group("frac") else "short-iso"
        if match := _CLASSIC.match(line):
            return "short-precise" if match.group("frac") else "short"
        return "short-monotonic" if line.startswith("[") else "short-unix"
    return "cat"


def _from_text(lines: list[str], markers: int) -> SavedJournal:
    kept = [line.rstrip("\r") for line in lines]
    messages: list[str] = []
    hosts: list[str] = []
    units: list[str] = []
    width = 0  # the previous entry's prefix width: journalctl indents a message's further lines by it
    for line in kept:
        parsed = split_line(0, line)
        if parsed.ident:
            width = len(parsed.raw) - len(parsed.evidence)
            message = parsed.evidence
            _add(hosts, parsed.raw[:width].rstrip().split(" ")[-2])
        elif width and line.startswith(" " * width):
            message = line[width:]
        else:
            message = line
        if parsed.is_systemd or not parsed.ident:
            _unit_said(units, message)
        messages.append(message)
    return SavedJournal(
        _text_format(kept), tuple(kept), tuple(messages), tuple(hosts), tuple(sorted(units)), markers=markers
    )


def _unit_said(units: list[str], message: str) -> None:
    """systemd's lines name the unit: ``Started sglang.service - …``, ``sglang.service: Main process exited``."""
    if (said := _UNIT_SAID.match(message)) is not None:
        _add(units, said.group("unit") or said.group("owner"))


def _add(values: list[str], value: str) -> None:
    if value and value not in values:
        values.append(value)


# ----------------------------------------------------------------------------------------------- JSON


def _field(entry: Mapping[str, object], name: str) -> str | None:
    """A field's text: journalctl writes a string, an array of bytes (not UTF-8 or not printable), null (too
    big with ``--output-fields``/``--all`` off), or an array of those when the field has several values."""
    value = entry.get(name)
    if isinstance(value, list) and value and not all(isinstance(b, int) for b in value):
        value = value[0]  # several values: journalctl's short format prints the first
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and not isinstance(b, bool) for b in value):
        return bytes(b & 0xFF for b in value).decode("utf-8", errors="replace")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _iso(entry: Mapping[str, object]) -> str:
    stamp = _field(entry, "__REALTIME_TIMESTAMP")
    try:
        seconds = int(stamp or "") // 1_000_000
    except ValueError:
        seconds = 0
    if not 0 <= seconds < 253402300800:  # journalctl's own range: 1970 up to year 9999
        seconds = 0
    days, rest = divmod(seconds, 86400)
    year, month, day = _civil_from_days(days)
    return f"{year:04d}-{month:02d}-{day:02d}T{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}+0000"


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """The proleptic Gregorian date of a day count since 1970-01-01, in UTC (H. Hinnant's
    ``civil_from_days``): the core reads no clock and imports no ``datetime``."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _entry_lines(entry: Mapping[str, object]) -> tuple[list[str], list[str]] | None:
    message = _field(entry, "MESSAGE")
    if message is None:
        return None
    ident = _field(entry, "SYSLOG_IDENTIFIER") or _field(entry, "_COMM") or "unknown"
    pid = _field(entry, "_PID") or _field(entry, "SYSLOG_PID")
    host = _field(entry, "_HOSTNAME") or "localhost"
    ident = re.sub(r"[\s\[\]:]", "_", ident)
    host = re.sub(r"\s", "_", host)
    prefix = f"{_iso(entry)} {host} {ident}{f'[{pid}]' if pid and pid.isdigit() else ''}: "
    parts = message.removesuffix("\n").split("\n") or [""]
    lines = [prefix + parts[0], *(" " * len(prefix) + part for part in parts[1:])]
    return lines, parts


def _objects(lines: list[str]) -> tuple[list[object], int]:
    """One JSON value per line (json, json-seq); else, when no line is one, the values of the whole text in
    turn (json-pretty); what is not JSON is counted."""
    values: list[object] = []
    skipped = 0
    for line in lines:
        text = line.strip().lstrip("\x1e")  # json-seq: each record starts with RS
        if not text:
            continue
        try:
            values.append(json.loads(text))
        except (ValueError, RecursionError):
            skipped += 1
    if values or not skipped:
        return values, skipped
    text, pos, decoder = "\n".join(lines), 0, json.JSONDecoder()
    pretty: list[object] = []
    while (pos := _next_value(text, pos)) < len(text):
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return pretty, 1  # a cut or broken file: the values before the break, and the rest counted as one
        pretty.append(value)
    return pretty, 0


def _next_value(text: str, pos: int) -> int:
    while pos < len(text) and (text[pos].isspace() or text[pos] == "\x1e"):
        pos += 1
    return pos


def _from_json(lines: list[str], markers: int) -> SavedJournal:
    out: list[str] = []
    messages: list[str] = []
    hosts: list[str] = []
    units: list[str] = []
    values, skipped = _objects(lines)
    for entry in values:
        if not isinstance(entry, dict):
            skipped += 1
            continue
        rendered = _entry_lines(entry)
        if rendered is None:
            continue
        out.extend(rendered[0])
        messages.extend(rendered[1])
        _add(hosts, _field(entry, "_HOSTNAME") or "")
        unit = _field(entry, "_SYSTEMD_UNIT") or ""
        _add(units, "" if unit in _SYSTEM_UNITS else unit)
        if (_field(entry, "SYSLOG_IDENTIFIER") or "") in _SYSTEM_IDENTS:
            _add(units, _field(entry, "UNIT") or "")
    return SavedJournal("json", tuple(out), tuple(messages), tuple(hosts), tuple(sorted(units)), skipped, markers)
