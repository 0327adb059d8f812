"""Journal lines with their prefixes taken apart: journalctl's short/short-iso and sglang's ``[time TPn]``."""

from __future__ import annotations

import re
from dataclasses import dataclass

# journalctl -o short, short-precise, short-iso(-precise), short-unix, short-monotonic:
# "Dec 01 08:00:00 host python3[123]: ".
_JOURNAL_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
    r"|\d{9,}\.\d+|\[ *\d+\.\d+\])"
    r" (?P<host>\S+) (?P<ident>[^\s\[\]:]+)(?:\[(?P<pid>\d+)\])?: ?"
)
# sglang's logger: "[2026-12-01 08:00:00 DP0 TP3] " (milliseconds with SGLANG_LOG_MS; no ranks in the main process).
_SGLANG_PREFIX = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<ranks>(?: [A-Z][A-Z_]*\d+)*)\] ?"
)
_TP = re.compile(r"\bTP(\d+)\b")
_SYSTEM_IDENTS = frozenset({"systemd", "init"})


@dataclass(frozen=True)
class LogLine:
    """One journal line: where it sits, what it said, and which TP rank (if sglang said so)."""

    index: int
    raw: str
    text: str
    ident: str = ""
    rank: int | None = None
    ranks: str = ""
    has_sglang_prefix: bool = False
    evidence: str = ""  # the line without the journal prefix (sglang's kept): what the user recognises

    @property
    def is_systemd(self) -> bool:
        return self.ident in _SYSTEM_IDENTS


def split_line(index: int, raw: str) -> LogLine:
    """Take one raw line apart; never raises."""
    line = raw.rstrip("\r\n")
    ident = ""
    rest = line
    match = _JOURNAL_PREFIX.match(line)
    if match:
        ident = match.group("ident")
        rest = line[match.end() :]
    smatch = _SGLANG_PREFIX.match(rest)
    if not smatch:
        return LogLine(index=index, raw=line, text=rest, ident=ident, evidence=rest)
    ranks = smatch.group("ranks").strip()
    tp = _TP.search(ranks)
    return LogLine(
        index=index,
        raw=line,
        text=rest[smatch.end() :],
        ident=ident,
        rank=int(tp.group(1)) if tp else None,
        ranks=ranks,
        has_sglang_prefix=True,
        evidence=rest,
    )


def split_lines(lines: list[str] | tuple[str, ...]) -> list[LogLine]:
    """Every line taken apart; embedded newlines (a multi-line message in one string) become lines."""
    flat: list[str] = []
    for raw in lines:
        flat.extend(str(raw).splitlines() or [""])
    return [split_line(i, raw) for i, raw in enumerate(flat)]
