"""PURE: find the server's command inside an ``ExecStart=`` — through launchers, shells and containers.

The engine (``sglang`` by default, or ``vllm``) names the entry points looked for: ``python -m
sglang.launch_server`` (any python) / ``sglang serve``, or ``python -m vllm.entrypoints.openai.api_server`` /
``vllm serve``; ``engine_in_exec`` says which one a command runs. Handles the launchers of
``launchers.py`` (``numactl``, ``env``, ``sudo``, ``conda run`` …), ``bash -c '…'`` / ``su -c '…'``
scripts (tokenised with shell rules; their ``export``/``unset`` statements recorded) and
``docker``/``podman run`` (``-e`` in every spelling; a shell inside the container too). Along the way
every change to the environment is recorded, in order, so the caller can tell which place wins.
A word in front of sglang that is none of these is refused by name: guessing its options could
edit the wrong word.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from remediate.core.unitfile.execline import Token, parse_exec
from remediate.core.unitfile.launchers import EnvOp, assignment, parse_launcher
from remediate.core.unitfile.model import MappedText
from remediate.core.unitfile.shellwords import is_operator, split_shell
from remediate.errors import ConfigError

_PYTHON = re.compile(r"^python[0-9.]*$")
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh"})
_CONTAINER_TOOLS = frozenset({"docker", "podman", "nerdctl"})


@dataclass(frozen=True)
class _Entry:
    """How an engine's server is started: ``python -m MODULE`` or ``PROGRAM SUBCOMMAND``."""

    module: str
    program: str
    subcommand: str
    mentions: re.Pattern[str]


# sglang: python/sglang/launch_server.py and the `sglang serve` CLI; vLLM: vllm/entrypoints/openai/api_server.py
# and vllm/entrypoints/cli/serve.py (`vllm serve`).
_ENTRIES = {
    "sglang": _Entry("sglang.launch_server", "sglang", "serve", re.compile(r"sglang\.launch_server|\bsglang serve\b")),
    "vllm": _Entry(
        "vllm.entrypoints.openai.api_server",
        "vllm",
        "serve",
        re.compile(r"vllm\.entrypoints\.openai\.api_server|\bvllm serve\b"),
    ),
}
ENGINES: tuple[str, ...] = tuple(_ENTRIES)
# docker/podman run options that take a value (the rest, listed below, are boolean).
_RUN_VALUE_OPTS = frozenset(
    """
    --env --env-file --volume --mount --publish --name --gpus --shm-size --ipc --network --net --workdir
    --entrypoint --user --runtime --device --ulimit --cap-add --cap-drop --security-opt --label --restart
    --memory --cpus --cpuset-cpus --cpuset-mems --pull --platform --hostname --add-host --log-driver --log-opt
    --tmpfs --pid --uts --userns --group-add --stop-signal --stop-timeout --health-cmd --label-file --cgroupns
    --dns --dns-search --dns-option --expose --volumes-from --memory-swap --memory-reservation --oom-score-adj
    --pids-limit --device-cgroup-rule --cidfile --cpu-shares --cpu-period --cpu-quota --blkio-weight
    --domainname --isolation --link --mac-address --ip --ip6 --network-alias --storage-opt --sysctl --attach
    --annotation --health-interval --health-retries --health-timeout --health-start-period --volume-driver
    --cgroup-parent --detach-keys --secret --pod --requires --sdnotify --arch --os --conmon-pidfile --tz
    --umask --init-path --gidmap --uidmap --subuidname --subgidname --pidfile --preserve-fds --timeout
    --variant --systemd --cgroups --hooks-dir --image-volume --seccomp-policy --passwd-entry --chrootdirs
    --device-read-bps --device-write-bps --device-read-iops --device-write-iops --kernel-memory --cpu-rt-runtime
    --cpu-rt-period --memory-swappiness --shm-size-systemd --env-merge --health-on-failure
    """.split()
)
_RUN_BOOL_OPTS = frozenset(
    """
    --rm --detach --interactive --tty --init --privileged --read-only --publish-all --sig-proxy
    --oom-kill-disable --no-healthcheck --disable-content-trust --quiet --replace --env-host --http-proxy
    --rootfs --read-only-tmpfs --no-hosts --tls-verify --help
    """.split()
)
_RUN_SHORT_VALUE = "acehlmpuvw"
_RUN_SHORT_BOOL = "diPqt"
_GLOBAL_VALUE_OPTS = frozenset(
    "-H --host --config --context -c -l --log-level --root --runroot --url --connection --storage-driver "
    "--cgroup-manager --events-backend --namespace -n --address -a".split()
)


@dataclass(frozen=True)
class ContainerPorts:
    """What ``run`` says about the container's network: its ``-p``/``--publish`` values, ``--network``."""

    publish: tuple[str, ...] = ()
    network: str | None = None
    publish_all: bool = False  # -P/--publish-all: host ports the engine picks at start
    tool: str = "docker"  # docker, podman, nerdctl


@dataclass(frozen=True)
class ServerCommand:
    """Where the server's argv sits (any engine's): ``args`` are its words in the command's own layer."""

    kind: str  # "ExecStart=", "bash -c", "sh -c", "docker", "podman", "su -c"
    entry: Token  # the last word of the entry point (``sglang.launch_server`` or ``serve``)
    args: tuple[Token, ...]
    shell: bool  # args are shell words (inside ``sh -c``), else systemd words
    env_ops: tuple[EnvOp, ...] = ()  # what wrappers and scripts do to the environment, in order
    container_run: Token | None = None  # the ``run`` word of docker/podman
    ports: ContainerPorts | None = None  # the container's -p/--publish and --network (containers only)

    @property
    def last_word(self) -> Token:
        return self.args[-1] if self.args else self.entry

    @property
    def in_container(self) -> bool:
        return self.container_run is not None


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def mentions_entry(words: Sequence[Token], engine: str = "sglang") -> bool:
    """True when some word names the engine's entry point (so an unreadable wrapper is worth naming)."""
    if not words:
        return False
    entry = _ENTRIES[engine]
    pairs = zip(words, [*words[1:], None], strict=True)
    return any(
        entry.mentions.search(word.text)
        or (basename(word.text) == entry.program and nxt is not None and nxt.text == entry.subcommand)
        for word, nxt in pairs
    )


def _unreadable(program: str, engine: str) -> ConfigError:
    return ConfigError(f"ExecStart runs {engine} through `{program}`, which remediate cannot read")


def _until_separator(words: Sequence[Token], shell: bool) -> tuple[Token, ...]:
    out: list[Token] = []
    for word in words:
        if (shell and is_operator(word)) or (not shell and word.raw == ";"):
            break
        out.append(word)
    return tuple(out)


def _python_entry(words: Sequence[Token], shell: bool, kind: str, engine: str) -> ServerCommand | None:
    index = 1
    while index < len(words) and words[index].text.startswith("-"):
        option = words[index].text
        if option.startswith("-m"):
            module_index = index + 1 if option == "-m" else index
            if module_index >= len(words):
                return None
            module = words[module_index].text if option == "-m" else option[2:]
            if module != _ENTRIES[engine].module:
                return None
            return ServerCommand(kind, words[module_index], _until_separator(words[module_index + 1 :], shell), shell)
        if option.startswith("-c"):
            return None
        index += 2 if option in ("-X", "-W", "--check-hash-based-pycs") else 1
    return None


def _container_options(
    words: Sequence[Token], index: int, kind: str, ports: dict[str, list[str]], engine: str
) -> tuple[int, list[EnvOp], Token | None]:
    """Read ``run``'s options from ``words[index]``: (image index, env operations, --entrypoint word); the
    ``-p``/``--publish``, ``--network``/``--net`` and ``-P`` values go into ``ports``."""
    ops: list[EnvOp] = [EnvOp("clear", f"{kind} run (a container gets only its -e variables)")]
    entrypoint: Token | None = None
    where = f"{kind} -e"

    def env_value(token: Token, offset: int) -> None:
        found = assignment(token, offset)
        if found is not None:
            ops.append(EnvOp("set", where, name=found.name, assignment=found))
        elif token.text[offset:]:
            ops.append(EnvOp("inherit", f"{kind} -e {token.text[offset:]}", name=token.text[offset:]))

    while index < len(words) and words[index].text.startswith("-") and words[index].text != "-":
        word = words[index]
        text = word.text
        if text == "--":
            index += 1
            break
        if text.startswith("--"):
            name, eq, _ = text.partition("=")
            if name not in _RUN_VALUE_OPTS and name not in _RUN_BOOL_OPTS:
                raise _unreadable(f"{kind} run {name}", engine)
            value: Token | None = None
            offset = 0
            if eq:
                value, offset = word, len(name) + 1
            elif name in _RUN_VALUE_OPTS:
                index += 1
                if index >= len(words):
                    return len(words), ops, entrypoint
                value = words[index]
            if value is not None and name == "--env":
                env_value(value, offset)
            elif value is not None and name == "--env-file":
                ops.append(EnvOp("note", f"{kind} --env-file {value.text[offset:]}"))
            elif value is not None and name == "--entrypoint" and not eq:
                entrypoint = value
            elif value is not None and name in ("--publish", "--network", "--net"):
                key = "publish" if name == "--publish" else "network"  # --net is docker's old --network
                ports.setdefault(key, []).append(value.text[offset:])
            elif name == "--publish-all":
                ports.setdefault("publish-all", []).append("")
            index += 1
            continue
        pos = 1
        while pos < len(text):
            char = text[pos]
            if char in _RUN_SHORT_BOOL:
                if char == "P":
                    ports.setdefault("publish-all", []).append("")
                pos += 1
                continue
            if char not in _RUN_SHORT_VALUE:
                raise _unreadable(f"{kind} run -{char}", engine)
            offset = pos + 1 + (text[pos + 1 : pos + 2] == "=")
            if offset < len(text) or text.endswith("="):
                token, start = word, offset
            else:
                index += 1
                if index >= len(words):
                    return len(words), ops, entrypoint
                token, start = words[index], 0
            if char == "e":
                env_value(token, start)
            elif char == "p":
                ports.setdefault("publish", []).append(token.text[start:])
            break
        index += 1
    return index, ops, entrypoint


def _container_entry(words: Sequence[Token], kind: str, ops: list[EnvOp], engine: str) -> ServerCommand | None:
    index = 1
    while index < len(words) and words[index].text not in ("run", "container") and words[index].text.startswith("-"):
        index += 2 if words[index].text in _GLOBAL_VALUE_OPTS else 1
    if index < len(words) and words[index].text == "container":
        index += 1
    if index >= len(words) or words[index].text != "run":
        return None
    run = words[index]
    found: dict[str, list[str]] = {}
    image, env_ops, entrypoint = _container_options(words, index + 1, kind, found, engine)
    network = found.get("network")
    ports = ContainerPorts(
        tuple(found.get("publish", ())), network[-1] if network else None, "publish-all" in found, kind
    )
    command = words[image + 1 :]
    if entrypoint is not None:
        command = [entrypoint, *command]
    inner = find_command(command, shell=False, kind=kind, ops=[*ops, *env_ops], engine=engine)
    if inner is None:
        if mentions_entry(command, engine):
            raise _unreadable(f"{kind} run", engine)
        return None
    if inner.in_container:
        raise _unreadable(f"{kind} run … {inner.kind} run", engine)
    return ServerCommand(kind if not inner.shell else inner.kind, inner.entry, inner.args, inner.shell,
                         inner.env_ops, run, ports)  # fmt: skip


def _script_ops(command: Sequence[Token], kind: str) -> list[EnvOp]:
    """What a simple shell command before the server does to the environment."""
    if not command:
        return []
    first = command[0].text
    if all(assignment(word) is not None for word in command):
        return [EnvOp("set", kind, name=a.name, assignment=a) for a in map(assignment, command) if a is not None]
    if first in ("export", "declare", "typeset", "local", "readonly"):
        found = [assignment(word) for word in command[1:]]
        return [EnvOp("set", f"{kind} {first}", name=a.name, assignment=a) for a in found if a is not None]
    if first == "unset":
        return [EnvOp("unset", f"{kind} unset", name=word.text) for word in command[1:] if word.text[:1] != "-"]
    if first in ("source", "."):
        name = command[1].text if len(command) > 1 else ""
        return [EnvOp("note", f"`{first} {name}` in {kind}")]
    return []


def shell_script(script: Token, kind: str, ops: Sequence[EnvOp], engine: str = "sglang") -> ServerCommand | None:
    """The engine's command in a shell script (a ``-c`` string), with the script's own env changes."""
    tokens = split_shell(script.chars)
    seen = list(ops)
    command: list[Token] = []
    for token in [*tokens, None]:
        if token is None or is_operator(token):
            if command:
                found = find_command(command, shell=True, kind=kind, ops=seen, engine=engine)
                if found is not None:
                    return found
                seen.extend(_script_ops(command, kind))
            command = []
        else:
            command.append(token)
    return None


def _shell_entry(words: Sequence[Token], kind: str, ops: Sequence[EnvOp], engine: str) -> ServerCommand | None:
    index = 1
    has_c = False
    while index < len(words) and words[index].text.startswith("-") and not has_c:
        option = words[index].text
        has_c = not option.startswith("--") and "c" in option[1:]
        index += 1
    if not has_c or index >= len(words):
        return None
    return shell_script(words[index], kind, ops, engine)


def find_command(
    words: Sequence[Token], *, shell: bool, kind: str, ops: Sequence[EnvOp] = (), engine: str = "sglang"
) -> ServerCommand | None:
    """The engine's command in one simple command's words (``shell``: they are shell words)."""
    index = 0
    env = list(ops)
    while index < len(words):
        word = words[index]
        found = assignment(word) if shell else None
        if found is not None:
            env.append(EnvOp("set", kind, name=found.name, assignment=found))
        elif not (shell and word.text in ("exec", "nohup", "command")):
            break
        elif word.text == "exec":
            while index + 1 < len(words) and words[index + 1].text in ("-a", "-c", "-l", "-cl", "-lc"):
                index += 2 if words[index + 1].text == "-a" else 1  # exec -a NAME: argv[0] only
        index += 1
    if index >= len(words):
        return None
    program = basename(words[index].text)
    rest = words[index:]
    result: ServerCommand | None = None
    entry = _ENTRIES[engine]
    if _PYTHON.fullmatch(program):
        result = _python_entry(rest, shell, kind, engine)
    elif program == entry.program and len(rest) > 1 and rest[1].text == entry.subcommand:
        result = ServerCommand(kind, rest[1], _until_separator(rest[2:], shell), shell)
    elif program in _SHELLS:
        return _shell_entry(rest, f"{program} -c", env, engine)
    elif program in _CONTAINER_TOOLS:
        return _container_entry(rest, program, env, engine)
    else:
        return _launched(rest, program, shell=shell, kind=kind, env=env, engine=engine)
    if result is None:
        return None
    return ServerCommand(result.kind, result.entry, result.args, shell, tuple(env))


def _launched(
    words: Sequence[Token], program: str, *, shell: bool, kind: str, env: list[EnvOp], engine: str
) -> ServerCommand | None:
    """The engine's command behind a launcher (``numactl …``); unknown launchers are refused by name."""
    try:
        launch = parse_launcher(words, program)
    except ConfigError:
        if mentions_entry(words, engine):
            raise
        return None
    if launch is None:
        if mentions_entry(words[1:], engine):
            raise _unreadable(program, engine)
        return None
    env = [*env, *launch.ops]
    if launch.script is not None:
        return shell_script(launch.script, f"{program} -c", env, engine)
    rest = (launch.words if launch.words is not None else words)[launch.start :]
    if launch.module:
        if not rest or rest[0].text != _ENTRIES[engine].module:
            return None
        return ServerCommand(kind, rest[0], _until_separator(rest[1:], shell), shell, tuple(env))
    return find_command(rest, shell=shell, kind=kind, ops=env, engine=engine)


def find_in_exec(value: MappedText | str, engine: str = "sglang") -> ServerCommand | None:
    """The engine's command run by an ``ExecStart=`` value, or None (ConfigError: it cannot be read)."""
    line = parse_exec(value)
    if not line.words:
        return None
    words = list(line.words)
    if line.has_argv0_override and len(words) > 1:
        del words[1]
    return find_command(words, shell=False, kind="ExecStart=", engine=engine)


def engine_in_exec(value: MappedText | str) -> str | None:
    """Which engine an ``ExecStart=`` value runs: "sglang", "vllm" or None (ConfigError: a wrapper in front
    of that engine cannot be read)."""
    refused: list[tuple[str, ConfigError]] = []
    for engine in ENGINES:
        try:
            if find_in_exec(value, engine) is not None:
                return engine
        except ConfigError as exc:  # a docker option unknown to both passes: name the engine the line runs
            refused.append((engine, exc))
    text = value if isinstance(value, str) else value.text
    named = [exc for engine, exc in refused if _ENTRIES[engine].mentions.search(text)]
    if named or refused:
        raise (named or [exc for _, exc in refused])[0]
    return None


def mentions_engine(text: str, engine: str) -> bool:
    """True when ``text`` names the engine's entry point (``vllm serve``, ``-m sglang.launch_server``)."""
    return _ENTRIES[engine].mentions.search(text) is not None
