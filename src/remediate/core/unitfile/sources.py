"""The service as systemd assembles it from a fragment, drop-ins and environment files (pure).

Resolves the effective ``ExecStart=`` that runs the server (sglang, or another engine of
``core/engines``: the service knows which), the effective environment, and expands the server's argv
(``$VAR`` references included) into items that know where each word is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from remediate.core.engines import DEFAULT, ENGINES, Engine
from remediate.core.unitfile.argv import ArgItem, ServerCommand, find_flags, find_in_exec, shell_var
from remediate.core.unitfile.command import mentions_engine
from remediate.core.unitfile.config import ConfigRead, ServerConfig, config_words, named_config
from remediate.core.unitfile.envfile import EnvAssignment, EnvFile, parse_env_file, parse_environment, words_of
from remediate.core.unitfile.execline import Token, parse_exec, split_words
from remediate.core.unitfile.model import Directive, MappedText, UnitFile, parse_unit
from remediate.errors import ConfigError

_PARTIAL_VAR = re.compile(r"\$(\{[A-Za-z_]|[A-Za-z_])")
_WHOLE_BRACED = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SPECIFIER = re.compile(r"%(.)")


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _unescape(name: str) -> str:
    """systemd's unit-name unescaping: ``-`` is ``/``, ``\\xNN`` a byte."""
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), name.replace("-", "/"))


def expand_specifiers(text: str, unit_name: str) -> str:
    """Expand the unit-name specifiers of systemd.unit(5) (``%%``, ``%n``, ``%N``, ``%p``, ``%P``, ``%i``,
    ``%I``, ``%j``, ``%J``); others (``%H``, ``%u`` …) are left as written: their value is the host's."""
    if "%" not in text:
        return text
    full = unit_name
    stem = full.rsplit(".", 1)[0] if "." in full else full
    prefix, at, instance = stem.partition("@")
    last = prefix.rsplit("-", 1)[-1]
    table = {
        "%": "%", "n": full, "N": stem, "p": prefix, "P": _unescape(prefix), "j": last, "J": _unescape(last),
    }  # fmt: skip
    if at and instance:
        table |= {"i": instance, "I": _unescape(instance)}
    return _SPECIFIER.sub(lambda m: table.get(m.group(1), m.group(0)), text)


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str


@dataclass(frozen=True)
class UnitSources:
    fragment: SourceFile  # the unit file (FragmentPath)
    dropins: tuple[SourceFile, ...] = ()  # UNIT.d/*.conf in systemd's order
    env_files: Mapping[str, str | None] | None = None  # path -> text (None: missing); None: unreadable
    unit_name: str | None = None  # ``sglang@a.service`` (for %i, %n…); default: the fragment's file name
    config_files: Mapping[str, ConfigRead | None] | None = None  # --config YAML: path -> parsed (None: missing)

    @property
    def unit_files(self) -> tuple[SourceFile, ...]:
        return (self.fragment, *self.dropins)


@dataclass(frozen=True)
class Located:
    """A directive and the file it lives in."""

    path: str
    unit: UnitFile
    directive: Directive


@dataclass(frozen=True)
class VarValue:
    """Where an environment variable's effective value comes from."""

    name: str
    assignment: EnvAssignment | None  # None: unset, or unknown when ``unknown`` is set
    path: str | None
    where: str  # "Environment=" or "EnvironmentFile=/etc/default/sglang"
    anchor: int  # line start above which a marker goes
    unknown: str | None = None  # set when the value cannot be known: names where it may live
    removed: str | None = None  # set when UnsetEnvironment= removes the value: names the directive


@dataclass
class Service:
    """The parsed service: effective directives, environment files and the server's command (its engine's)."""

    sources: UnitSources
    units: dict[str, UnitFile]
    exec_start: Located
    command: ServerCommand
    environment: list[tuple[Located, EnvAssignment]]
    env_file_paths: list[tuple[str, bool]]  # (path, optional)
    unset: list[tuple[Located, str]] = field(default_factory=list)  # UnsetEnvironment= words: NAME or NAME=VALUE
    literal: bool = False  # ExecStart=:… (no variable substitution)
    env_files: dict[str, EnvFile] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    engine: Engine = DEFAULT  # the engine the command runs
    config: ServerConfig | None = None  # the ``--config`` YAML the command line names

    def items(self) -> list[ArgItem]:
        """The server's argv as the engine parses it, ``$VAR`` references expanded: a ``--config`` file's words
        first (core/unitfile/config.py: both engines put them before the command line's, which wins)."""
        cli = self.cli_items()
        if self.config is None or self.config.words is None:
            return cli
        where = f"--config {self.config.path}"
        return [ArgItem(w.text, None, self.config.path, where, (0, 0), None, 0, config=self.config.path)
                for w in self.config.words] + cli  # fmt: skip

    def lookup(self, name: str) -> VarValue:
        """The effective value of ``name`` (systemd.exec(5)): EnvironmentFile= overrides Environment=,
        and UnsetEnvironment= (``NAME``, or ``NAME=VALUE`` when the value matches) is applied last."""
        value = self._assigned(name)
        for located, word in reversed(self.unset):
            key, eq, only = word.partition("=")
            if key == name and (not eq or (value.assignment is not None and value.assignment.value.text == only)):
                return VarValue(name, None, value.path, value.where, value.anchor, value.unknown, _describe(located))
        return value

    def _assigned(self, name: str) -> VarValue:
        if self.sources.env_files is not None:
            for path, _ in reversed(self.env_file_paths):
                env = self.env_files.get(path)
                found = env.get(name) if env else None
                if env is not None and found is not None:
                    return VarValue(name, found, path, f"EnvironmentFile={path}", env.line_start(found.span[0]))
        elif self.env_file_paths:
            listed = ", ".join(f"EnvironmentFile={path}" for path, _ in self.env_file_paths)
            assigned = [pair for pair in self.environment if pair[1].name == name]
            if not assigned:
                return VarValue(name, None, None, listed, 0, unknown=f"${name} set in {listed}")
            note = f"{listed} not read here; it could override {name}"
            if note not in self.notes:
                self.notes.append(note)
        for located, assignment in reversed(self.environment):
            if assignment.name == name:
                return VarValue(name, assignment, located.path, "Environment=", located.directive.first_line.start)
        return VarValue(name, None, None, "", 0)

    def cli_items(self) -> list[ArgItem]:
        """The server's argv as its command line writes it, ``$VAR`` references expanded."""
        items: list[ArgItem] = []
        path = self.exec_start.path
        anchor = self.exec_start.directive.first_line.start
        prev_end = self.command.entry.file_span[1]
        kind = self.command.kind
        for word in self.command.args:
            text = word.text if self.command.shell else expand_specifiers(word.text, self.unit_name)
            braced = _WHOLE_BRACED.fullmatch(text)
            if self.literal:
                # ExecStart=:… — systemd substitutes no variables: every word is what it says.
                items.append(ArgItem(text, word.chars if text == word.text else None, path, kind, word.file_span,
                                     prev_end, anchor))  # fmt: skip
                prev_end = word.file_span[1]
                continue
            if self.command.shell:
                var, split = shell_var(word), True
            elif braced:
                var, split = braced.group(1), False  # systemd: ${NAME} is exactly one word
            else:
                var, split = word.split_var, True  # $NAME alone: split at whitespace
            if var is not None and not (split and word.quoted and self.command.shell):
                items.extend(self._expand(var, word.file_span, split=split))
            elif _PARTIAL_VAR.search(text) or text != word.text or (not self.command.shell and "$$" in text):
                shown = text if self.command.shell else self._expand_braced(text).replace("$$", "$")
                items.append(ArgItem(shown, None, path, kind, word.file_span, prev_end, anchor))
            else:
                items.append(ArgItem(text, word.chars, path, kind, word.file_span, prev_end, anchor))
            prev_end = word.file_span[1]
        return items

    @property
    def unit_name(self) -> str:
        return self.sources.unit_name or _basename(self.sources.fragment.path)

    def _expand_braced(self, text: str) -> str:
        """``${NAME}`` references inside a word replaced by their values (for reading, not editing)."""

        def value(match: re.Match[str]) -> str:
            found = self.lookup(match.group(1))
            return found.assignment.value.text if found.assignment is not None else ""

        return _BRACED.sub(value, text)

    def _expand(self, name: str, span: tuple[int, int], *, split: bool = True) -> list[ArgItem]:
        value = self.lookup(name)
        if value.unknown is not None:
            return [ArgItem(f"${name}", None, self.exec_start.path, value.where, span, None, 0, value.unknown)]
        if value.assignment is None or value.path is None:
            return []  # unset: expands to nothing
        where = f"{value.where} (${name})"
        out: list[ArgItem] = []
        prev: int | None = None
        words = words_of(value.assignment.value) if split else [value.assignment.value]
        for word in words:
            if not len(word):
                return [ArgItem("", None, value.path, where, value.assignment.span, None, value.anchor)]
            word_span = word.span_of(0, len(word))
            holder = value.assignment if split else None  # ${NAME} is one word: nothing is added inside it
            text = word.text
            if value.where == "Environment=":
                text = expand_specifiers(text, self.unit_name)  # Environment= values take specifiers too
            chars = word if text == word.text else None
            out.append(ArgItem(text, chars, value.path, where, word_span, prev, value.anchor, None, holder))
            prev = word_span[1]
        return out


def _service_directives(units: dict[str, UnitFile], sources: UnitSources, key: str) -> list[Located]:
    """Effective ``key=`` directives of [Service]: an empty assignment resets the list."""
    found: list[Located] = []
    for source in sources.unit_files:
        unit = units[source.path]
        for directive in unit.directives_in("Service", key):
            if not directive.value.text:
                found = []
            else:
                found.append(Located(source.path, unit, directive))
    return found


def _describe(located: Located) -> str:
    number = located.directive.first_line.number
    return f"{located.path}:{number}"


def _runner(located: Located) -> tuple[Engine, ServerCommand] | None:
    """The engine and its command run by one ``ExecStart=`` (sglang first, as before the seam), or None.
    A wrapper that cannot be read in front of an engine is a ConfigError naming the line."""
    for engine in ENGINES.values():
        try:
            command = find_in_exec(located.directive.value, engine.name)
        except ConfigError as exc:
            if engine is not DEFAULT and not _mentions(located.directive.value, engine):
                continue
            raise ConfigError(f"ExecStart= at line {located.directive.first_line.number}: {exc.message}",
                              source=located.path) from None  # fmt: skip
        if command is not None:
            return engine, command
    return None


def _mentions(value: MappedText, engine: Engine) -> bool:
    return mentions_engine(value.text, engine.name)


def load_service(sources: UnitSources) -> Service:
    """Parse every source and find the one effective ``ExecStart=`` that runs a server engine."""
    units = {source.path: parse_unit(source.text) for source in sources.unit_files}
    runners: list[tuple[Located, tuple[Engine, ServerCommand]]] = []
    for located in _service_directives(units, sources, "ExecStart"):
        found = _runner(located)
        if found is not None:
            runners.append((located, found))
    if not runners:
        names = " or ".join(engine.label for engine in ENGINES.values())
        raise ConfigError(f"no ExecStart= runs {names}", source=sources.fragment.path)
    if len(runners) > 1:
        listed = ", ".join(_describe(located) for located, _ in runners)
        raise ConfigError(
            f"several ExecStart= lines run {runners[0][1][0].label} ({listed}); edit one by hand",
            source=sources.fragment.path,
        )
    located, (engine, command) = runners[0]
    environment = [
        (env, assignment)
        for env in _service_directives(units, sources, "Environment")
        for assignment in parse_environment(env.directive.value)
    ]
    paths: list[tuple[str, bool]] = []
    for env in _service_directives(units, sources, "EnvironmentFile"):
        raw = expand_specifiers(env.directive.value.text, sources.unit_name or _basename(sources.fragment.path))
        paths.append((raw[1:].strip(), True) if raw.startswith("-") else (raw, False))
    unset = [
        (env, word.text)
        for env in _service_directives(units, sources, "UnsetEnvironment")
        for word in _words_or_nothing(env.directive.value)
    ]
    literal = ":" in parse_exec(located.directive.value).prefix
    service = Service(sources, units, located, command, environment, paths, unset, literal, engine=engine)
    if sources.env_files is not None:
        for path, optional in paths:
            text = sources.env_files.get(path)
            if text is None and not optional:
                raise ConfigError(f"EnvironmentFile={path} does not exist", source=sources.fragment.path)
            if text is not None:
                service.env_files[path] = parse_env_file(text)
    service.config = _server_config(service)
    return service


def _server_config(service: Service) -> ServerConfig | None:
    """The ``--config`` file the command line names, read from what the probe brought (None: none named)."""
    try:
        named = named_config([item.text for item in service.cli_items()])
    except ConfigError as exc:
        raise ConfigError(exc.message, source=service.exec_start.path) from None
    if named is None:
        return None
    path = named[1]
    files = service.sources.config_files
    engine = service.engine
    if service.command.in_container:
        return ServerConfig(path, None, "not read: a path inside the container")
    if not path.startswith("/"):
        return ServerConfig(path, None, "not read: a path relative to the service's working directory")
    if not path.endswith((".yaml", ".yml")):
        return ServerConfig(path, None, f"not read: not .yaml/.yml, which {engine.label} refuses at startup")
    if files is None or path not in files:
        return ServerConfig(path, None, "not read")
    read = files[path]
    if read is None:
        return ServerConfig(path, None, f"missing on the host ({engine.label} exits at startup)")
    if read.error is not None or read.data is None:
        raise ConfigError(read.error or f"--config {path} was not parsed", source=path)
    words, notes = config_words(read.data, engine)
    service.notes.extend(f"--config {path}: {note}" for note in notes)
    return ServerConfig(path, words, notes=notes)


def config_notes(sources: UnitSources) -> list[str]:
    """What the server's ``--config`` YAML sets of the knobs remediate reads, and that the command line wins over
    it, or why it was not read (shown by status, plan, diagnose, oom); empty without one, or where the unit
    cannot be read (the run says why)."""
    try:
        service = load_service(sources)
    except ConfigError:
        return []
    config = service.config
    if config is None:
        return []
    if config.words is None:
        return [f"--config {config.path}: {config.unread}; a value set only there is not seen here"]
    engine = service.engine
    items = service.items()
    set_there: list[str] = []
    for flag in (engine.fraction_flag, engine.prefill_flag):
        hits = find_flags(items, flag, resolve=engine.resolve_flag, bool_flags=engine.bool_flags)
        from_file = [h for h in hits if items[h.flag].config is not None]
        if from_file and from_file[-1].value_text is not None:
            overridden = " (the command line overrides it)" if hits[-1] is not from_file[-1] else ""
            set_there.append(f"{flag} {from_file[-1].value_text}{overridden}")
    said = ", ".join(set_there) if set_there else f"neither {engine.fraction_option} nor {engine.prefill_option}"
    return [f"--config {config.path} sets {said}; the command line wins over it",
            *(f"--config {config.path}: {note}" for note in config.notes)]  # fmt: skip


def _words_or_nothing(value: MappedText) -> list[Token]:
    try:
        return split_words(value)
    except ConfigError:
        return []  # systemd ignores a line it cannot split


def _readable_sglang(value: MappedText) -> bool:
    try:
        return find_in_exec(value) is not None
    except ConfigError:
        return False


def runs_sglang(unit_text: str) -> bool:
    """True when any ``ExecStart=`` of the unit's [Service] section runs sglang (readably)."""
    unit = parse_unit(unit_text)
    return any(_readable_sglang(d.value) for d in unit.directives_in("Service", "ExecStart"))


def shared_with_instances(unit_name: str, paths: list[str]) -> list[str]:
    """Of ``paths``, those every instance of ``unit_name``'s template reads (``sglang@.service``, its
    ``sglang@.service.d/`` drop-ins, an EnvironmentFile= without the instance in its path). Empty when
    ``unit_name`` is no template instance (``sglang@a.service``)."""
    stem, dot, suffix = unit_name.rpartition(".")
    prefix, at, instance = stem.partition("@")
    if not (dot and at and instance):
        return []
    own = re.compile(rf"(^|[/._-]){re.escape(instance)}([/._-]|$)")
    return [path for path in paths if f"/{unit_name}" not in path and not own.search(path)]


def refuse_template_edit(unit: str, paths: list[str], *, flag: str | None = None) -> None:
    """An edit of a template (``sglang@.service``) changes every instance, but one run restarts and
    verifies one instance: refuse it, naming the file, rather than leave the others unverified. ``flag``:
    the option that would roll the change through every instance (``oom --all-instances``)."""
    shared = shared_with_instances(unit, paths)
    if shared:
        way = f"pass {flag} to change it once and restart every running instance in turn, or " if flag else ""
        raise ConfigError(
            f"{unit} is an instance of a template: changing {shared[0]} changes every instance, but only "
            f"{unit} would be restarted and verified; {way}put the change in a drop-in for this instance "
            f"(systemctl edit {unit}) or remediate the template's instances by hand",
            source=shared[0],
        )


def server_args(sources: UnitSources) -> list[str]:
    """The sglang arguments as the server receives them (``$VAR``/``${VAR}`` and specifiers expanded)."""
    return [item.text for item in load_service(sources).items()]
