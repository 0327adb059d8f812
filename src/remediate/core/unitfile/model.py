"""Lossless model of a systemd unit file.

The text is kept verbatim; parsing only adds an index over it. Directives carry their *logical*
value (continuation lines joined the way systemd joins them) together with, for every character of
that value, the span of file text it came from. Edits are then plain text replacements at exact
file offsets, so every byte that is not edited stays as it was.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

# A span of file text: (start, end) offsets, end exclusive.
Span = tuple[int, int]

_COMMENT_CHARS = "#;"
_WHITESPACE = " \t"
_EOL_CHARS = "\r\n\0"
BOM = "\ufeff"


@dataclass(frozen=True)
class MappedText:
    """A string whose every character remembers the span of file text it stands for."""

    text: str
    spans: tuple[Span, ...]

    def __len__(self) -> int:
        return len(self.text)

    def slice(self, start: int, end: int) -> MappedText:
        """The characters ``[start, end)``, still mapped."""
        return MappedText(self.text[start:end], self.spans[start:end])

    def span_of(self, start: int, end: int) -> Span:
        """File span covering characters ``[start, end)`` (non-empty range)."""
        return self.spans[start][0], self.spans[end - 1][1]

    def point_after(self, index: int) -> int:
        """File offset just after character ``index``."""
        return self.spans[index][1]

    @classmethod
    def identity(cls, text: str, base: int = 0) -> MappedText:
        """Map ``text`` to itself, starting at file offset ``base``."""
        return cls(text, tuple((base + i, base + i + 1) for i in range(len(text))))


@dataclass(frozen=True)
class TextEdit:
    """Replace file text ``[start, end)`` with ``text`` (``start == end`` inserts)."""

    start: int
    end: int
    text: str


def apply_edits(text: str, edits: Iterable[TextEdit]) -> str:
    """Apply non-overlapping edits; insertions at one point keep their given order."""
    ordered = sorted(enumerate(edits), key=lambda pair: (pair[1].start, pair[1].end, pair[0]))
    out: list[str] = []
    pos = 0
    for _, edit in ordered:
        if edit.start < pos:
            if edit.text or not out or out[-1]:
                raise ValueError(f"overlapping edits at offset {edit.start}")
            pos = max(pos, edit.end)  # two overlapping deletions delete their union
            continue
        out.append(text[pos : edit.start])
        out.append(edit.text)
        pos = edit.end
    out.append(text[pos:])
    return "".join(out)


@dataclass(frozen=True)
class Line:
    """One physical line: ``start``/``end`` offsets of its content, ``eol`` its line ending."""

    number: int  # 1-based
    start: int
    end: int
    eol: str
    content: str

    @property
    def full_end(self) -> int:
        """Offset just after the line ending."""
        return self.end + len(self.eol)

    @property
    def is_comment(self) -> bool:
        stripped = self.content.lstrip(_WHITESPACE)
        return bool(stripped) and stripped[0] in _COMMENT_CHARS


@dataclass(frozen=True)
class Directive:
    """``Key=value`` with its logical value; ``lines`` are the physical lines it spans."""

    section: str
    key: str
    value: MappedText
    lines: tuple[Line, ...]  # every physical line read for it, comment lines in between included

    @property
    def first_line(self) -> Line:
        return self.lines[0]

    @property
    def last_line(self) -> Line:
        return self.lines[-1]


@dataclass(frozen=True)
class UnitFile:
    """A parsed unit file: the verbatim text plus an index of lines, sections and directives."""

    text: str
    lines: tuple[Line, ...]
    directives: tuple[Directive, ...]
    section_headers: tuple[tuple[str, Line], ...]

    def directives_in(self, section: str, key: str | None = None) -> list[Directive]:
        """Directives of ``section`` (optionally only ``key``), in file order."""
        return [d for d in self.directives if d.section == section and (key is None or d.key == key)]

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a file offset."""
        starts = [line.start for line in self.lines]
        index = max(bisect.bisect_right(starts, offset) - 1, 0)
        line = self.lines[index]
        return line.number, offset - line.start + 1

    def line_at(self, offset: int) -> Line:
        """The physical line holding ``offset``."""
        number, _ = self.position(offset)
        return self.lines[number - 1]

    @property
    def eol(self) -> str:
        """The file's line ending (the first one found, ``\\n`` by default)."""
        for line in self.lines:
            if line.eol and line.eol != "\0":
                return line.eol
        return "\n"


def split_lines(text: str) -> tuple[Line, ...]:
    """Physical lines; ``\\r\\n``, ``\\n``, a lone ``\\r`` and a NUL byte end a line, as in systemd's
    read_line() (a NUL ends the line there: what follows it on that line is a line of its own)."""
    lines: list[Line] = []
    pos = 0
    n = len(text)
    while pos < n:
        end = pos
        while end < n and text[end] not in _EOL_CHARS:
            end += 1
        if end < n and text[end] == "\r" and end + 1 < n and text[end + 1] == "\n":
            eol = "\r\n"
        elif end < n:
            eol = text[end]
        else:
            eol = ""
        lines.append(Line(len(lines) + 1, pos, end, eol, text[pos:end]))
        pos = end + len(eol)
    return tuple(lines)


def _is_continued(chars: str) -> bool:
    """True when the text ends in an unescaped backslash (systemd's escape scan)."""
    escaped = False
    for char in chars:
        escaped = (not escaped) and char == "\\"
    return escaped


def _strip(value: MappedText) -> MappedText:
    text = value.text
    start = len(text) - len(text.lstrip(_WHITESPACE + "\r\n"))
    end = len(text.rstrip(_WHITESPACE + "\r\n"))
    return value.slice(start, max(start, end))


def parse_unit(text: str) -> UnitFile:
    """Index ``text`` like systemd's config parser; never fails, ``render_unit`` gives ``text`` back."""
    lines = split_lines(text)
    if text.startswith(BOM) and lines:
        # systemd skips a UTF-8 byte order mark at the start of a file; the text keeps it.
        first = lines[0]
        lines = (Line(1, first.start + 1, first.end, first.eol, first.content[1:]), *lines[1:])
    directives: list[Directive] = []
    headers: list[tuple[str, Line]] = []
    section = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.is_comment:
            index += 1
            continue
        # Join continuation lines; comment lines inside a continuation are skipped by systemd.
        chars: list[str] = []
        spans: list[Span] = []
        read = [line]
        current = line
        while True:
            chars.extend(current.content)
            spans.extend((current.start + i, current.start + i + 1) for i in range(len(current.content)))
            if not _is_continued("".join(chars)):
                break
            # The backslash becomes a space standing for the backslash and the line break.
            spans[-1] = (spans[-1][0], current.full_end)
            chars[-1] = " "
            nxt = index + 1
            while nxt < len(lines) and lines[nxt].is_comment:
                read.append(lines[nxt])
                nxt += 1
            if nxt >= len(lines):
                break
            index = nxt
            current = lines[index]
            read.append(current)
        logical = _strip(MappedText("".join(chars), tuple(spans)))
        index += 1
        if not logical.text:
            continue
        if logical.text.startswith("[") and logical.text.endswith("]"):
            section = logical.text[1:-1]
            headers.append((section, line))
            continue
        eq = logical.text.find("=")
        if eq <= 0:
            continue  # garbage: systemd warns and ignores it; we keep it verbatim
        key = logical.text[:eq].strip(_WHITESPACE)
        value = _strip(logical.slice(eq + 1, len(logical)))
        directives.append(Directive(section, key, value, tuple(read)))
    return UnitFile(text, lines, tuple(directives), tuple(headers))


def render_unit(unit: UnitFile) -> str:
    """The unit's text, byte for byte."""
    return unit.text


def removal(text: str, start: int, end: int, prev_end: int | None) -> TextEdit:
    """Delete ``[start, end)`` (a flag and its value) keeping the layout around it sane."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    before = text[line_start:start]
    after = text[end:line_end].rstrip("\r")
    if not before.strip(" \t") and after.strip(" \t") == "\\":
        return TextEdit(line_start, min(line_end + 1, len(text)), "")  # the words had their own line
    if not before.strip(" \t") and not after.strip(" \t") and prev_end is not None:
        return TextEdit(prev_end, end, "")  # last line of a continuation: join to the previous word
    if after[:1] in (" ", "\t") and after.strip(" \t") not in ("", "\\"):
        return TextEdit(start, end + len(after) - len(after.lstrip(" \t")), "")
    return TextEdit(start - (len(before) - len(before.rstrip(" \t"))), end, "")
