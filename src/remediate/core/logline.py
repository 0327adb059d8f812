"""Journal lines with their prefixes taken apart: journalctl's short/short-iso and sglang's ``[time TPn]``.

Evidence is read only where sglang, torch and systemd print it: at the start of a line's message (after the
prefixes), after the exception class of a traceback's last line (``torch.OutOfMemoryError: ``), and after
the wrappers that re-raise a message (``Capture cuda graph failed: ``, ``CUDA error: ``). Text in the middle of
a line is what someone logged (a request, a prompt) and never evidence: ``at_message`` finds it only there.
"""

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
# What may stand before a message on its line: the exception class of Python's traceback print
# (traceback.format_exception_only: "module.Class: message"), sglang's cuda_graph_runner.py re-raise
# ("Capture cuda graph failed: {e}", "Capture prefill CUDA graph failed: …") and torch's c10 CUDA check
# ("CUDA error: {cudaGetErrorString}").
_LEAD = re.compile(
    r"(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception): "
    r"|(?i:Capture (?:prefill )?cuda graph failed: |CUDA error: )"
)
# sglang scheduler.py: f"{name} hit an exception: {traceback}" — a traceback on one line (a log shipper that
# joins lines): its exception line is the first "Class: " after a blank.
_FLATTENED = re.compile(r"\w+ hit an exception: Traceback \(most recent call last\):")
_INNER_LEAD = re.compile(r"(?<=\s)(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception): ")
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


def message_starts(text: str) -> list[int]:
    """Where a message may start in ``text`` (a line without its prefixes): 0, then after each lead. In a
    traceback flattened onto sglang's header line, the first exception line after the header starts one too."""
    starts = [0]
    if (header := _FLATTENED.match(text)) is not None and (inner := _INNER_LEAD.search(text, header.end())):
        starts.append(inner.end())
    while (lead := _LEAD.match(text, starts[-1])) is not None and lead.end() > starts[-1]:
        starts.append(lead.end())
    return starts


def at_message(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """``pattern`` matched where a message starts in ``text`` (see the module's doc), or None."""
    for start in message_starts(text):
        if (found := pattern.match(text, start)) is not None:
            return found
    return None


def message_text(raw: str) -> str:
    """A raw journal or stderr line without journalctl's and sglang's prefixes."""
    return split_line(0, raw).text
