"""POSIX-shell tokenising of the command string handed to ``bash -c`` / ``sh -c``.

Only what is needed to find and edit a simple command: words (with quotes removed and every
character mapped back to the file) and the control operators that end a command.
"""

from __future__ import annotations

from remediate.core.unitfile.execline import Token
from remediate.core.unitfile.model import MappedText, Span
from remediate.errors import ConfigError

CONTROL_OPERATORS = ("&&", "||", ";;", ";", "|", "&", "\n", "(", ")")
_BLANK = " \t"
_DQUOTE_ESCAPABLE = '$`"\\\n'


def split_shell(source: MappedText) -> list[Token]:
    """Tokens of a shell command string; operators are tokens whose ``raw`` is the operator."""
    text = source.text
    tokens: list[Token] = []
    pos = 0
    n = len(text)
    while pos < n:
        char = text[pos]
        if char in _BLANK:
            pos += 1
            continue
        if char == "#":
            while pos < n and text[pos] != "\n":
                pos += 1
            continue
        operator = next((op for op in CONTROL_OPERATORS if text.startswith(op, pos)), None)
        if operator is not None:
            end = pos + len(operator)
            chars = source.slice(pos, end)
            tokens.append(Token(pos, end, operator, operator, chars, False, source.span_of(pos, end)))
            pos = end
            continue
        start = pos
        out: list[str] = []
        spans: list[Span] = []
        quoted = False
        while pos < n:
            char = text[pos]
            if char in _BLANK or any(text.startswith(op, pos) for op in CONTROL_OPERATORS):
                break
            if char == "\\":
                if pos + 1 < n and text[pos + 1] != "\n":
                    out.append(text[pos + 1])
                    spans.append(source.span_of(pos, pos + 2))
                pos += 2
            elif char == "'":
                quoted = True
                close = text.find("'", pos + 1)
                if close < 0:
                    raise ConfigError("unterminated ' quote in the shell command; the shell rejects it")
                out.extend(text[pos + 1 : close])
                spans.extend(source.spans[pos + 1 : close])
                pos = close + 1
            elif char == '"':
                quoted = True
                pos += 1
                while pos < n and text[pos] != '"':
                    if text[pos] == "\\" and pos + 1 < n and text[pos + 1] in _DQUOTE_ESCAPABLE:
                        if text[pos + 1] != "\n":
                            out.append(text[pos + 1])
                            spans.append(source.span_of(pos, pos + 2))
                        pos += 2
                    else:
                        out.append(text[pos])
                        spans.append(source.spans[pos])
                        pos += 1
                if pos >= n:
                    raise ConfigError('unterminated " quote in the shell command; the shell rejects it')
                pos += 1
            else:
                out.append(char)
                spans.append(source.spans[pos])
                pos += 1
        end = min(pos, n)
        word = "".join(out)
        tokens.append(
            Token(start, end, text[start:end], word, MappedText(word, tuple(spans)), quoted, source.span_of(start, end))
        )
    return tokens


def is_operator(token: Token) -> bool:
    """True for ``&&``, ``||``, ``;``, ``|``, ``&``, newline and parentheses."""
    return not token.quoted and token.raw in CONTROL_OPERATORS
