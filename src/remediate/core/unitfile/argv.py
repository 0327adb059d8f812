"""Find the sglang argv inside an ``ExecStart=`` and read its flags the way argparse does.

Handles ``python -m sglang.launch_server`` (any python, venv pythons), ``sglang serve``,
``/usr/bin/env [VAR=x …]`` prefixes, ``bash -c '…'`` / ``sh -c "…"`` wrappers (the inner script is
tokenised with shell rules) and ``docker run`` / ``podman run`` wrappers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from remediate.core.unitfile.envfile import EnvAssignment
from remediate.core.unitfile.execline import Token, parse_exec
from remediate.core.unitfile.model import MappedText, Span
from remediate.core.unitfile.shellwords import is_operator, split_shell

# sglang server flags (argparse long options, without "--"). Prefixes are resolved against this
# table, so it lists neighbours of the flags we edit too: a prefix counts only when it is unique.
SGLANG_FLAGS: frozenset[str] = frozenset(
    """
    model-path model tokenizer-path tokenizer-mode skip-tokenizer-init load-format trust-remote-code
    dtype kv-cache-dtype quantization context-length device served-model-name chat-template
    is-embedding revision host port mem-fraction-static max-running-requests max-total-tokens
    chunked-prefill-size max-prefill-tokens schedule-policy schedule-conservativeness
    cpu-offload-gb page-size tp-size tensor-parallel-size pp-size pipeline-parallel-size
    dp-size data-parallel-size ep-size expert-parallel-size ep
    stream-interval random-seed log-level log-requests enable-metrics api-key
    config attention-backend sampling-backend grammar-backend disable-cuda-graph
    disable-cuda-graph-padding disable-radix-cache cuda-graph-max-bs cuda-graph-max-bs-decode
    cuda-graph-max-bs-prefill cuda-graph-bs enable-dp-attention enable-torch-compile
    torch-compile-max-bs enable-mixed-chunk enable-p2p-check triton-attention-reduce-in-fp32
    speculative-algorithm speculative-draft-model-path speculative-num-steps
    reasoning-parser tool-call-parser watchdog-timeout nnodes node-rank dist-init-addr
    max-micro-batch-size enable-ep-moe moe-a2a-backend dist-timeout base-gpu-id gpu-id-step
    """.split()
)
# Flags that take no value (argparse store_true); every other flag consumes the next argument.
SGLANG_BOOL_FLAGS: frozenset[str] = frozenset(
    """
    trust-remote-code skip-tokenizer-init is-embedding log-requests enable-metrics disable-cuda-graph
    disable-cuda-graph-padding disable-radix-cache enable-dp-attention enable-torch-compile
    enable-mixed-chunk enable-p2p-check triton-attention-reduce-in-fp32 enable-ep-moe
    """.split()
)

_PYTHON = re.compile(r"^python[0-9.]*$")
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh"})
_CONTAINER_TOOLS = frozenset({"docker", "podman", "nerdctl"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_VAR = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")
# docker/podman run options that take a separate value (the rest are boolean).
_RUN_VALUE_OPTS = frozenset(
    """
    -e --env --env-file -v --volume --mount -p --publish --name --gpus --shm-size --ipc --network
    --net -w --workdir --entrypoint -u --user --runtime --device --ulimit --cap-add --cap-drop
    --security-opt -l --label --restart -m --memory --cpus --cpuset-cpus --pull --platform
    --hostname -h --add-host --log-driver --log-opt --tmpfs --pid --uts --userns --group-add
    --stop-signal --stop-timeout --health-cmd --label-file --cgroupns --dns --expose --volumes-from
    --memory-swap --oom-score-adj --pids-limit --device-cgroup-rule
    """.split()
)
_GLOBAL_VALUE_OPTS = frozenset({"-H", "--host", "--config", "--context", "-c", "-l", "--log-level"})


def resolve_flag(name: str) -> str | None:
    """Canonical flag for ``name`` (without ``--``): exact, else a prefix of exactly one flag."""
    if name in SGLANG_FLAGS:
        return name
    matches = [flag for flag in SGLANG_FLAGS if flag.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class SglangCommand:
    """Where the sglang argv sits: ``args`` are its words in the command's own layer."""

    kind: str  # "ExecStart=", "bash -c", "sh -c", "docker", "podman"
    entry: Token  # the last word of the entry point (``sglang.launch_server`` or ``serve``)
    args: tuple[Token, ...]
    shell: bool  # args are shell words (inside ``sh -c``), else systemd words
    env_prefix: tuple[EnvAssignment, ...] = ()  # ``VAR=x`` before the command (shell or env)
    container_run: Token | None = None  # the ``run`` word of docker/podman
    container_env: tuple[EnvAssignment, ...] = ()  # ``-e NAME=VALUE`` arguments

    @property
    def last_word(self) -> Token:
        return self.args[-1] if self.args else self.entry

    @property
    def in_container(self) -> bool:
        return self.container_run is not None


def _assignment(token: Token, offset: int = 0) -> EnvAssignment | None:
    text = token.text[offset:]
    if not _ASSIGNMENT.match(text):
        return None
    eq = offset + text.index("=")
    return EnvAssignment(
        token.text[offset:eq], token.chars.slice(eq + 1, len(token.chars)), token.chars.spans[eq][1], token.file_span
    )


def _until_separator(words: Sequence[Token], shell: bool) -> tuple[Token, ...]:
    out: list[Token] = []
    for word in words:
        if (shell and is_operator(word)) or (not shell and word.raw == ";"):
            break
        out.append(word)
    return tuple(out)


def _python_entry(words: Sequence[Token], shell: bool, kind: str) -> SglangCommand | None:
    index = 1
    while index < len(words) and words[index].text.startswith("-"):
        option = words[index].text
        if option.startswith("-m"):
            module_index = index + 1 if option == "-m" else index
            if module_index >= len(words):
                return None
            module = words[module_index].text if option == "-m" else option[2:]
            if module != "sglang.launch_server":
                return None
            return SglangCommand(kind, words[module_index], _until_separator(words[module_index + 1 :], shell), shell)
        index += 2 if option in ("-X", "-W") else 1
    return None


def _container_entry(words: Sequence[Token], kind: str) -> SglangCommand | None:
    index = 1
    while index < len(words) and words[index].text != "run" and words[index].text.startswith("-"):
        index += 2 if words[index].text in _GLOBAL_VALUE_OPTS else 1
    if index >= len(words) or words[index].text != "run":
        return None
    run = words[index]
    env: list[EnvAssignment] = []
    index += 1
    while index < len(words) and words[index].text.startswith("-"):
        option = words[index].text
        name = option.split("=", 1)[0]
        if name in ("-e", "--env"):
            if "=" in option and name == "--env":
                found = _assignment(words[index], len("--env="))
            elif index + 1 < len(words):
                found = _assignment(words[index + 1])
            else:
                found = None
            if found is not None:
                env.append(found)
        index += 2 if (name in _RUN_VALUE_OPTS and "=" not in option) else 1
    inner = find_command(words[index + 1 :], shell=False, kind=kind)
    if inner is None or inner.shell or inner.in_container:
        return None
    return SglangCommand(kind, inner.entry, inner.args, False, inner.env_prefix, run, tuple(env))


def _shell_entry(words: Sequence[Token], kind: str) -> SglangCommand | None:
    index = 1
    has_c = False
    while index < len(words) and words[index].text.startswith("-") and not has_c:
        option = words[index].text
        has_c = not option.startswith("--") and "c" in option[1:]
        index += 1
    if not has_c or index >= len(words):
        return None
    tokens = split_shell(words[index].chars)
    command: list[Token] = []
    for token in [*tokens, None]:
        if token is None or is_operator(token):
            found = find_command(command, shell=True, kind=kind) if command else None
            if found is not None:
                return found
            command = []
        else:
            command.append(token)
    return None


def find_command(words: Sequence[Token], *, shell: bool, kind: str) -> SglangCommand | None:
    """The sglang command in one simple command's words (``shell``: they are shell words)."""
    index = 0
    env: list[EnvAssignment] = []
    while index < len(words):
        word = words[index]
        found = _assignment(word) if shell else None
        if found is not None:
            env.append(found)
        elif not (shell and word.text in ("exec", "nohup", "command")):
            break
        index += 1
    if index >= len(words):
        return None
    program = basename(words[index].text)
    rest = words[index:]
    result: SglangCommand | None = None
    if program == "env":
        skip = 1
        while skip < len(rest) and (rest[skip].text.startswith("-") or _assignment(rest[skip])):
            found = _assignment(rest[skip])
            if found is not None:
                env.append(found)
            skip += 2 if rest[skip].text in ("-u", "-C", "-S") else 1
        inner = find_command(rest[skip:], shell=shell, kind=kind)
        if inner is not None:
            return SglangCommand(
                inner.kind, inner.entry, inner.args, inner.shell, (*env, *inner.env_prefix),
                inner.container_run, inner.container_env,
            )  # fmt: skip
        return None
    if _PYTHON.match(program):
        result = _python_entry(rest, shell, kind)
    elif program == "sglang" and len(rest) > 1 and rest[1].text == "serve":
        result = SglangCommand(kind, rest[1], _until_separator(rest[2:], shell), shell)
    elif program in _SHELLS:
        return _shell_entry(rest, f"{program} -c")
    elif program in _CONTAINER_TOOLS:
        return _container_entry(rest, program)
    if result is None:
        return None
    return SglangCommand(result.kind, result.entry, result.args, shell, tuple(env))


def find_in_exec(value: MappedText | str) -> SglangCommand | None:
    """The sglang command run by an ``ExecStart=`` value, or None."""
    line = parse_exec(value)
    if not line.words:
        return None
    words = list(line.words)
    if line.has_argv0_override and len(words) > 1:
        del words[1]
    return find_command(words, shell=False, kind="ExecStart=")


def shell_var(token: Token) -> str | None:
    """``NAME`` for an unquoted ``$NAME`` / ``${NAME}`` shell word (split at whitespace)."""
    match = _SHELL_VAR.match(token.text)
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


@dataclass(frozen=True)
class FlagHit:
    """One occurrence of a flag: ``flag`` and ``value`` index items (value None: ``=`` form/bool)."""

    name: str
    flag: int
    value: int | None
    value_text: str | None
    value_chars: MappedText | None  # editable value characters (in the '=' form: after '=')
    eq_point: int | None  # file offset after '=' in the '=' form


def find_flags(items: Sequence[ArgItem], name: str) -> list[FlagHit]:
    """Every occurrence of flag ``name`` (prefixes and ``=`` forms resolved) in an sglang argv."""
    hits: list[FlagHit] = []
    index = 0
    while index < len(items):
        text = items[index].text
        if not text.startswith("--") or len(text) == 2:
            index += 1
            continue
        flag_name, eq, inline = text[2:].partition("=")
        canonical = resolve_flag(flag_name)
        takes_value = canonical not in SGLANG_BOOL_FLAGS
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
