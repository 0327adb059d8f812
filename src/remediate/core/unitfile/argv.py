"""Read the sglang argv's flags the way argparse does (finding the argv: ``core.unitfile.command``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from remediate.core.engines.sglang.flags import SGLANG_BOOL_FLAGS, SGLANG_FLAGS, resolve_flag
from remediate.core.unitfile.command import ServerCommand, basename, find_command, find_in_exec
from remediate.core.unitfile.envfile import EnvAssignment
from remediate.core.unitfile.execline import Token
from remediate.core.unitfile.model import MappedText, Span

_SHELL_VAR = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")


__all__ = [
    "SGLANG_BOOL_FLAGS", "SGLANG_FLAGS", "ArgItem", "FlagHit", "ServerCommand", "basename", "find_command",
    "find_flags", "find_in_exec", "resolve_flag", "shell_var",
]  # fmt: skip


def shell_var(token: Token) -> str | None:
    """``NAME`` for an unquoted ``$NAME`` / ``${NAME}`` shell word (split at whitespace)."""
    match = _SHELL_VAR.fullmatch(token.text)
    return (match.group(1) or match.group(2)) if match and not token.quoted else None


@dataclass(frozen=True)
class ArgItem:
    """One argv element as sglang sees it, with where it is written.

    ``chars`` is None when the element cannot be edited (unknown or partly expanded content);
    ``opaque`` is set (naming the source) when its content is unknown.
    """

    text: str
    chars: MappedText | None
    path: str
    where: str
    span: Span
    prev_end: int | None  # end of the previous word in the same source (for tidy removal)
    anchor: int  # file offset of the line start above which a marker goes
    opaque: str | None = None
    holder: EnvAssignment | None = None  # the variable's assignment when the word came from ``$VAR``
    config: str | None = None  # the ``--config`` YAML file the word came from (never edited: the CLI wins)


@dataclass(frozen=True)
class FlagHit:
    """One occurrence of a flag: ``flag`` and ``value`` index items (value None: ``=`` form/bool)."""

    name: str
    flag: int
    value: int | None
    value_text: str | None
    value_chars: MappedText | None  # editable value characters (in the '=' form: after '=')
    eq_point: int | None  # file offset after '=' in the '=' form


def find_flags(
    items: Sequence[ArgItem],
    name: str,
    *,
    resolve: Callable[[str], str | None] = resolve_flag,
    bool_flags: frozenset[str] = SGLANG_BOOL_FLAGS,
) -> list[FlagHit]:
    """Every occurrence of flag ``name`` (prefixes and ``=`` forms resolved) in a server's argv: sglang's
    table by default, another engine's through ``resolve`` and ``bool_flags`` (its Engine's)."""
    hits: list[FlagHit] = []
    index = 0
    while index < len(items):
        text = items[index].text
        if not text.startswith("--") or len(text) == 2:
            index += 1
            continue
        flag_name, eq, inline = text[2:].partition("=")
        canonical = resolve(flag_name)
        takes_value = canonical not in bool_flags
        if canonical == name:
            item = items[index]
            if eq:
                chars = item.chars.slice(len(flag_name) + 3, len(item.chars)) if item.chars else None
                point = item.chars.spans[len(flag_name) + 2][1] if item.chars else None
                hits.append(FlagHit(name, index, None, inline, chars, point))
            elif index + 1 < len(items) and takes_value:
                value_item = items[index + 1]
                hits.append(FlagHit(name, index, index + 1, value_item.text, value_item.chars, None))
            else:
                hits.append(FlagHit(name, index, None, None, None, None))
        index += 2 if (takes_value and not eq and canonical is not None) else 1
    return hits


def server_endpoint(argv: tuple[str, ...] | list[str], default_port: int = 30000) -> tuple[str, int]:
    """Where the sglang server listens, as seen from its host (``0.0.0.0`` means loopback); ``default_port``
    when the command line names no port."""
    host, port = "127.0.0.1", default_port
    for i, word in enumerate(argv):
        for name in ("--host", "--port"):
            value: str | None = None
            if word == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif word.startswith(name + "="):
                value = word.split("=", 1)[1]
            if value is None:
                continue
            if name == "--port" and value.isdigit():
                port = int(value)
            elif name == "--host":
                host = value
    if host in ("0.0.0.0", "", "::", "[::]", "localhost"):
        host = "127.0.0.1"
    return host, port
