"""systemd's word splitting of command lines and ``Environment=`` values (systemd.syntax(7)).

Not shell rules: ``"…"`` and ``'…'`` quote (parts of) a word, C escapes are decoded everywhere,
there is no globbing, redirection or ``~``. ``%`` specifiers are left untouched. ``$VAR`` as a whole
word and ``${VAR}`` anywhere are references that systemd expands at exec time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from remediate.core.unitfile.model import MappedText, Span
from remediate.errors import ConfigError

EXEC_PREFIX_CHARS = "-@:+!|"
_WHITESPACE = " \t\n\r"
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}
_VAR_WORD = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_VAR_BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


@dataclass(frozen=True)
class Token:
    """One word: ``start``/``end`` index the raw text it was read from; ``text`` is unquoted.

    ``chars`` maps every unquoted character back to the file (through the source's mapping);
    ``raw`` is the word as written, ``quoted`` whether any part of it was quoted.
    """

    start: int
    end: int
    raw: str
    text: str
    chars: MappedText
    quoted: bool
    file_span: Span  # the whole raw word, quotes included, in the file

    @property
    def split_var(self) -> str | None:
        """``NAME`` when the word is ``$NAME`` (expanded and split at whitespace by systemd)."""
        match = _VAR_WORD.fullmatch(self.text)
        return match.group(1) if match and not self.quoted else None

    @property
    def braced_vars(self) -> list[str]:
        """Names of ``${NAME}`` references in the word."""
        return _VAR_BRACED.findall(self.text)


def _decode_escape(text: str, pos: int) -> tuple[str, int]:
    """Decode the C escape whose backslash is at ``pos``; return (chars, new position)."""
    if pos + 1 >= len(text):
        return "", pos + 1  # a trailing lone backslash: dropped, as systemd does with RELAX
    char = text[pos + 1]
    if char in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[char], pos + 2
    if char == "x" and re.match(r"[0-9a-fA-F]{2}", text[pos + 2 : pos + 4]):
        return chr(int(text[pos + 2 : pos + 4], 16)), pos + 4
    if char in "01234567" and re.match(r"[0-7]{3}", text[pos + 1 : pos + 4]):
        return chr(int(text[pos + 1 : pos + 4], 8)), pos + 4
    if char == "u" and re.match(r"[0-9a-fA-F]{4}", text[pos + 2 : pos + 6]):
        return chr(int(text[pos + 2 : pos + 6], 16)), pos + 6
    if char == "U" and re.match(r"[0-9a-fA-F]{8}", text[pos + 2 : pos + 10]):
        return chr(int(text[pos + 2 : pos + 10], 16)), pos + 10
    return char, pos + 2  # unknown escape: keep the character (systemd is lenient here)


def split_words(source: MappedText | str, begin: int = 0) -> list[Token]:
    """Split a systemd value (from index ``begin``) into words: systemd.syntax(7) quoting, C escapes.

    An unterminated quote raises ConfigError (systemd ignores such a line with "Invalid syntax")."""
    src = MappedText.identity(source) if isinstance(source, str) else source
    text = src.text
    tokens: list[Token] = []
    pos = begin
    n = len(text)
    while True:
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            return tokens
        start = pos
        chars: list[str] = []
        spans: list[Span] = []
        quote = ""
        quoted = False
        while pos < n:
            char = text[pos]
            if not quote and char in _WHITESPACE:
                break
            if char == "\\":
                decoded, nxt = _decode_escape(text, pos)
                file_span = src.span_of(pos, min(nxt, n))
                chars.extend(decoded)
                spans.extend(file_span for _ in decoded)
                pos = nxt
            elif quote and char == quote:
                quote = ""
                pos += 1
            elif not quote and char in "'\"":
                quote = char
                quoted = True
                pos += 1
            else:
                chars.append(char)
                spans.append(src.spans[pos])
                pos += 1
        if quote:
            # systemd rejects the whole line ("Invalid syntax"): never guess where the word ends.
            raise ConfigError(f"unterminated {quote} quote; systemd rejects this line")
        unquoted = "".join(chars)
        mapped = MappedText(unquoted, tuple(spans))
        tokens.append(Token(start, pos, text[start:pos], unquoted, mapped, quoted, src.span_of(start, pos)))


@dataclass(frozen=True)
class ExecLine:
    """A parsed ``ExecStart=`` value: prefix characters and argv words (argv[0] is the path)."""

    prefix: str
    words: tuple[Token, ...]

    @property
    def has_argv0_override(self) -> bool:
        """``@``: the second word is argv[0] handed to the program, not an argument."""
        return "@" in self.prefix

    @property
    def program(self) -> Token | None:
        return self.words[0] if self.words else None

    @property
    def args(self) -> tuple[Token, ...]:
        """Arguments after argv[0] (after the argv[0] override word with ``@``)."""
        skip = 2 if self.has_argv0_override else 1
        return self.words[skip:]


def parse_exec(value: MappedText | str) -> ExecLine:
    """Parse an ``ExecStart=`` value; the prefix characters are peeled off the first word."""
    src = MappedText.identity(value) if isinstance(value, str) else value
    stripped = src.text.lstrip(_WHITESPACE)
    lead = len(src.text) - len(stripped)
    count = 0
    while count < len(stripped) and stripped[count] in EXEC_PREFIX_CHARS:
        count += 1
    return ExecLine(stripped[:count], tuple(split_words(src, lead + count)))


def quote_word(word: str) -> str:
    """Quote ``word`` for an ExecStart= line when needed (systemd.syntax, not shell)."""
    if word and _SAFE_WORD.fullmatch(word):
        return word
    escaped = (
        word.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t").replace("$", "$$")
    )
    return f'"{escaped}"'
