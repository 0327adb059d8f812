"""Environment assignments: ``EnvironmentFile=`` files and ``Environment=`` values.

Both are read losslessly: every character of a value is mapped to the span of text it came from, so
a value (or one option inside it) is replaced in place, keeping quotes and layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from remediate.core.unitfile.execline import split_words
from remediate.core.unitfile.model import MappedText, Span, TextEdit
from remediate.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DQUOTE_ESCAPABLE = '"\\`$\n'


@dataclass(frozen=True)
class EnvAssignment:
    """``NAME=VALUE``: the decoded value mapped to its text; ``value_point`` is where an empty
    value (or an appended part) is written; ``span`` covers the whole assignment."""

    name: str
    value: MappedText
    value_point: int
    span: Span

    def value_end_point(self) -> int:
        """Offset just after the value's last character (inside any closing quote)."""
        return self.value.point_after(len(self.value) - 1) if len(self.value) else self.value_point

    def replace_value(self, start: int, end: int, new: str) -> TextEdit:
        """Edit replacing value characters ``[start, end)`` with ``new``."""
        if start == end:
            point = self.value.point_after(start - 1) if start else self.value_point
            return TextEdit(point, point, new)
        span = self.value.span_of(start, end)
        return TextEdit(span[0], span[1], new)


def parse_environment(value: MappedText) -> list[EnvAssignment]:
    """Assignments of one ``Environment=`` value (systemd.syntax quoting, several per line)."""
    found: list[EnvAssignment] = []
    try:
        words = split_words(value)
    except ConfigError:
        return found  # systemd ignores the whole line ("Invalid syntax")
    for word in words:
        eq = word.text.find("=")
        if eq <= 0 or not _NAME.match(word.text[:eq]):
            continue  # systemd ignores invalid assignments with a warning
        found.append(
            EnvAssignment(
                word.text[:eq], word.chars.slice(eq + 1, len(word.chars)), word.chars.spans[eq][1], word.file_span
            )
        )
    return found


@dataclass(frozen=True)
class EnvFile:
    """A parsed environment file; ``text`` is kept verbatim."""

    text: str
    assignments: tuple[EnvAssignment, ...]

    def get(self, name: str) -> EnvAssignment | None:
        """The last assignment of ``name`` (the one that wins)."""
        matches = [a for a in self.assignments if a.name == name]
        return matches[-1] if matches else None

    def line_start(self, offset: int) -> int:
        """Offset of the start of the line holding ``offset``."""
        return self.text.rfind("\n", 0, offset) + 1


class _EnvReader:
    """State machine after systemd's parse_env_file_internal()."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.found: list[EnvAssignment] = []

    def run(self) -> list[EnvAssignment]:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t\r\n":
                self.pos += 1
            elif char in "#;":
                self._skip_comment()
            else:
                self._assignment()
        return self.found

    def _skip_comment(self) -> None:
        text = self.text
        while self.pos < len(text) and text[self.pos] not in "\r\n":
            # A backslash escapes the line break: the comment continues (as in systemd).
            self.pos += 2 if text[self.pos] == "\\" else 1

    def _assignment(self) -> None:
        text = self.text
        start = self.pos
        while self.pos < len(text) and text[self.pos] not in "=\r\n":
            self.pos += 1
        if self.pos >= len(text) or text[self.pos] != "=":
            return  # a line without '=': ignored
        key = text[start : self.pos].strip()
        if key.startswith("export "):
            key = key[len("export ") :].strip()
        self.pos += 1
        value_point = self.pos
        chars: list[str] = []
        spans: list[Span] = []
        trailing_blank = 0  # unquoted trailing whitespace is dropped
        while self.pos < len(text):
            char = text[self.pos]
            if char in "\r\n":
                break
            if char == "\\":
                nxt = text[self.pos + 1 : self.pos + 2]
                if nxt in ("\n", "\r"):
                    self.pos += 3 if text.startswith("\r\n", self.pos + 1) else 2
                    continue
                if nxt:
                    chars.append(nxt)
                    spans.append((self.pos, self.pos + 2))
                self.pos = min(self.pos + 2, len(text))  # a backslash that ends the text escapes nothing
                trailing_blank = 0
            elif char in "'\"":
                self._quoted(char, chars, spans)
                trailing_blank = 0
            elif char in " \t" and not chars:
                self.pos += 1
            else:
                chars.append(char)
                spans.append((self.pos, self.pos + 1))
                trailing_blank = trailing_blank + 1 if char in " \t" else 0
                self.pos += 1
        end = len(chars) - trailing_blank
        if _NAME.match(key):
            value = MappedText("".join(chars[:end]), tuple(spans[:end]))
            stop = spans[end - 1][1] if end else value_point
            self.found.append(EnvAssignment(key, value, value_point, (start, max(stop, self.pos))))

    def _quoted(self, quote: str, chars: list[str], spans: list[Span]) -> None:
        text = self.text
        self.pos += 1
        while self.pos < len(text) and text[self.pos] != quote:
            nxt = text[self.pos + 1 : self.pos + 2]
            if quote == '"' and text[self.pos] == "\\" and nxt and nxt in _DQUOTE_ESCAPABLE:
                if nxt != "\n":
                    chars.append(text[self.pos + 1])
                    spans.append((self.pos, self.pos + 2))
                self.pos += 2
                continue
            chars.append(text[self.pos])
            spans.append((self.pos, self.pos + 1))
            self.pos += 1
        self.pos = min(self.pos + 1, len(text))  # past the closing quote (an unclosed one ends the text)


def parse_env_file(text: str) -> EnvFile:
    """Parse an ``EnvironmentFile=``: ``KEY=VALUE`` lines, ``#``/``;`` comments, quotes, continuations."""
    return EnvFile(text, tuple(_EnvReader(text).run()))


def words_of(value: MappedText) -> list[MappedText]:
    """A value split at whitespace, as systemd splits ``$VAR`` (no quote processing)."""
    words: list[MappedText] = []
    pos = 0
    text = value.text
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        start = pos
        while pos < len(text) and not text[pos].isspace():
            pos += 1
        words.append(value.slice(start, pos))
    return words
