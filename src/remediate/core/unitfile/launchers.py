"""PURE: the option grammar of the launchers people put in front of the interpreter.

``numactl --cpunodebind=0 python3 -m sglang.launch_server …``: to find (and edit) the sglang argv we
must know, for every wrapper, which of its options take an argument and where its command starts,
exactly as its own getopt does. A wrapper option we do not know could swallow the next word, so it
is refused (naming it) rather than guessed. Each wrapper may also change the environment the server
gets (``env -u``, ``sudo``'s env_reset, ``su -l``…): that is reported as environment operations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from remediate.core.unitfile.envfile import EnvAssignment
from remediate.core.unitfile.execline import Token
from remediate.core.unitfile.grammars import GRAMMARS, Grammar
from remediate.core.unitfile.shellwords import is_operator, split_shell
from remediate.errors import ConfigError

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class EnvOp:
    """One change a wrapper or script makes to the environment, in the order they apply.

    ``kind``: ``set`` (``assignment``), ``unset`` (``name``), ``clear`` (nothing inherited), ``inherit``
    (``docker -e NAME``: the value comes from the unit's environment), ``note`` (may change it; unread).
    """

    kind: str
    where: str
    name: str | None = None
    assignment: EnvAssignment | None = None


@dataclass
class Launch:
    """Where a launcher's command starts: ``words[start:]``; or ``script`` (``su -c``) holds it."""

    start: int
    ops: list[EnvOp] = field(default_factory=list)
    script: Token | None = None  # a shell command string (su/runuser -c)
    module: bool = False  # ``uv run -m``: words[start] is a module name
    words: list[Token] | None = None  # the words ``start`` indexes when the launcher re-split them (env -S)


def _cannot(program: str, option: str) -> ConfigError:
    return ConfigError(f"ExecStart runs sglang through `{program} {option}`, which remediate cannot read")


@dataclass
class _Options:
    """Parsed options of one launcher: (option, argument token or None) in order."""

    found: list[tuple[str, Token | None, str | None]] = field(default_factory=list)  # (name, token, value)
    end: int = 0

    def has(self, *names: str) -> bool:
        return any(name in names for name, _, _ in self.found)

    def values(self, *names: str) -> list[tuple[Token | None, str | None]]:
        return [(token, value) for name, token, value in self.found if name in names]


def _parse_options(
    words: Sequence[Token], index: int, program: str, grammar: Grammar, *, pre: bool = False, permute: bool = False
) -> tuple[_Options, list[int]]:
    """Read options from ``words[index:]``; return them and the indexes of positional words skipped.

    Options end at ``--``, at the first non-option (getopt's ``+``), or, with ``permute``, are read
    anywhere (util-linux su). ``pre``: the options before a subcommand.
    """
    short_arg = grammar.pre_short_arg if pre else grammar.short_arg
    long_arg = grammar.pre_long_arg if pre else grammar.long_arg
    opts = _Options()
    positional: list[int] = []
    while index < len(words):
        word = words[index]
        text = word.text
        if text == "--":
            index += 1
            break
        if not text.startswith("-") or text == "-":
            if text == "-" and program in ("su", "runuser"):
                opts.found.append(("-l", None, None))
                index += 1
                continue
            if permute and not opts.has("-u", "--user"):
                positional.append(index)  # su's user (util-linux su permutes its options)
                index += 1
                continue
            break
        if pre and text in grammar.pre_flags:
            opts.found.append((text, None, None))
            index += 1
            continue
        if text.startswith("--"):
            name, eq, value = text.partition("=")
            if not pre and name in grammar.refuse:
                raise _cannot(program, name)
            if pre and name in grammar.pre_flags:
                opts.found.append((name, None, None))
            elif name in long_arg:
                if eq:
                    opts.found.append((name, word, value))
                elif name in grammar.long_optional:
                    opts.found.append((name, None, None))
                elif index + 1 < len(words):
                    index += 1
                    opts.found.append((name, words[index], words[index].text))
                else:
                    raise _cannot(program, name)
            elif not pre and (name in grammar.long_flag or name in grammar.long_optional):
                opts.found.append((name, word if eq else None, value if eq else None))
            else:
                raise _cannot(program, name)
            index += 1
            continue
        if grammar.numeric_short and text[1:].lstrip("+-").isdigit():
            opts.found.append(("-n", word, text[1:]))
            index += 1
            continue
        pos = 1
        while pos < len(text):
            char = text[pos]
            name = "-" + char
            if not pre and name in grammar.refuse:
                raise _cannot(program, name)
            if char in short_arg:
                rest = text[pos + 1 :]
                if rest:
                    opts.found.append((name, word, rest))
                elif index + 1 < len(words):
                    index += 1
                    opts.found.append((name, words[index], words[index].text))
                else:
                    raise _cannot(program, name)
                break
            if not pre and char in grammar.short_optional:
                opts.found.append((name, word, text[pos + 1 :] or None))
                break
            flags = grammar.short_flag if not pre else "".join(f[1:] for f in grammar.pre_flags if len(f) == 2)
            if char not in flags:
                raise _cannot(program, name)
            opts.found.append((name, None, None))
            pos += 1
        index += 1
    opts.end = index
    return opts, positional


def _split_string(token: Token, offset: int, where: str) -> list[Token]:
    """``env -S STRING``: STRING split into words the way env does (quotes, backslashes), still mapped."""
    words = split_shell(token.chars.slice(offset, len(token.chars)))
    if any(is_operator(word) for word in words):
        raise _cannot(where, "-S")  # env has no operators: a ';' or '|' there is a literal we do not model
    return words


def _env(words: Sequence[Token], where: str) -> Launch:
    """env(1): ``-i``/``-``, ``-u NAME``, ``-C DIR``, ``-0``, ``-v``, ``-S STRING`` (split and read on),
    signals, then ``NAME=VALUE``."""
    words = list(words)
    launch = Launch(1, words=words)
    index = 1
    while index < len(words):
        text = words[index].text
        if text == "--":
            index += 1
            break
        if text in ("-i", "--ignore-environment", "-"):
            launch.ops.append(EnvOp("clear", f"{where} {text}"))
        elif text in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string") or (
            len(text) > 2 and text[:2] in ("-u", "-C", "-S") and not text.startswith("--")
        ):
            name = text[:2] if not text.startswith("--") else text
            value = text[2:] if len(text) > 2 and not text.startswith("--") else None
            holder, offset = words[index], len(text) - len(value) if value is not None else 0
            if value is None:
                index += 1
                if index >= len(words):
                    raise _cannot(where, text)
                value = words[index].text
                holder, offset = words[index], 0
            if name in ("-S", "--split-string"):
                words[index : index + 1] = _split_string(holder, offset, where)
                continue
            if name in ("-u", "--unset"):
                launch.ops.append(EnvOp("unset", f"{where} -u", name=value))
        elif text.startswith(("--unset=", "--chdir=")):
            if text.startswith("--unset="):
                launch.ops.append(EnvOp("unset", f"{where} -u", name=text.split("=", 1)[1]))
        elif text.startswith("--split-string="):
            words[index : index + 1] = _split_string(words[index], len("--split-string="), where)
            continue
        elif text in ("-0", "--null", "-v", "--debug", "--list-signal-handling") or text.startswith(
            ("--default-signal", "--ignore-signal", "--block-signal")
        ):
            pass
        elif text.startswith("-") and len(text) > 1:
            raise _cannot(where, text)
        elif _ASSIGNMENT.match(text):
            launch.ops.append(EnvOp("set", where, name=text.split("=", 1)[0], assignment=assignment(words[index])))
        else:
            break
        index += 1
    launch.start = index
    return launch


def assignment(token: Token, offset: int = 0) -> EnvAssignment | None:
    """``NAME=VALUE`` in ``token.text[offset:]`` as an assignment mapped to the file, else None."""
    text = token.text[offset:]
    if not _ASSIGNMENT.match(text):
        return None
    eq = offset + text.index("=")
    return EnvAssignment(
        token.text[offset:eq], token.chars.slice(eq + 1, len(token.chars)), token.chars.spans[eq][1], token.file_span
    )


def parse_launcher(words: Sequence[Token], program: str) -> Launch | None:
    """Where the command of launcher ``program`` (``words[0]``) starts; None when it is no launcher."""
    if program == "env":
        return _env(words, "env")
    grammar = GRAMMARS.get(program)
    if grammar is None:
        return None
    index = 1
    if grammar.subcommand is not None:
        pre, _ = _parse_options(words, 1, program, grammar, pre=True)
        index = pre.end
        if index >= len(words) or words[index].text != grammar.subcommand:
            return None
        index += 1
    permute = program in ("su", "runuser")
    opts, positional = _parse_options(words, index, program, grammar, permute=permute)
    launch = Launch(opts.end + grammar.positionals)
    if program == "uv" and opts.has("-m", "--module"):
        launch.module = True
    if program == "micromamba":
        for token, _ in opts.values("-e", "--env"):
            if token is not None:
                offset = token.text.index("=") + 1 if token.text.startswith("--env=") else 0
                offset = 2 if token.text.startswith("-e") and len(token.text) > 2 else offset
                found = assignment(token, offset)
                if found is not None:
                    launch.ops.append(EnvOp("set", "micromamba run -e", name=found.name, assignment=found))
        if opts.has("--clean-env"):
            launch.ops.insert(0, EnvOp("clear", "micromamba run --clean-env"))
    if program == "setpriv" and opts.has("--reset-env"):
        launch.ops.append(EnvOp("clear", "setpriv --reset-env"))
    if program == "sudo":
        _sudo(words, opts, launch)
    if permute:
        _su(words, program, opts, positional, launch)
    return launch


def _sudo(words: Sequence[Token], opts: _Options, launch: Launch) -> None:
    """sudo resets the environment (env_reset) unless ``-E``; ``NAME=VALUE`` words may follow the options."""
    preserve = opts.values("--preserve-env")
    if opts.has("-E") or any(value is None for _, value in preserve):
        launch.ops.append(EnvOp("note", "sudo -E (sudoers may still drop variables)"))
    else:
        kept = {name for _, value in preserve if value for name in value.split(",")}
        launch.ops.append(EnvOp("clear", "sudo (env_reset)", name=",".join(sorted(kept)) or None))
    while launch.start < len(words) and _ASSIGNMENT.match(words[launch.start].text):
        found = assignment(words[launch.start])
        if found is not None:
            launch.ops.append(EnvOp("set", "sudo", name=found.name, assignment=found))
        launch.start += 1


def _su(words: Sequence[Token], program: str, opts: _Options, positional: list[int], launch: Launch) -> None:
    """su/runuser: ``-c CMD`` runs CMD with the user's shell; runuser ``-u USER CMD…`` runs CMD directly."""
    if opts.has("-l", "--login"):
        launch.ops.append(EnvOp("clear", f"{program} -l (a login shell)"))
    commands = opts.values("-c", "--command", "--session-command")
    if commands:
        token, value = commands[-1]
        if token is None or value != token.text:
            raise _cannot(program, "-c")  # an attached -cCMD: the mapping to the file is not kept
        launch.script = token
        launch.start = len(words)
        return
    if program == "runuser" and opts.has("-u", "--user"):
        launch.start = opts.end
        return
    raise _cannot(program, "without -c")
