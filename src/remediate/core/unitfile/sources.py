"""The service as systemd assembles it from a fragment, drop-ins and environment files (pure).

Resolves the effective ``ExecStart=`` that runs sglang, the effective environment, and expands the
sglang argv (``$VAR`` references included) into items that know where each word is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from remediate.core.unitfile.argv import ArgItem, SglangCommand, find_in_exec, shell_var
from remediate.core.unitfile.envfile import EnvAssignment, EnvFile, parse_env_file, parse_environment, words_of
from remediate.core.unitfile.model import Directive, UnitFile, parse_unit
from remediate.errors import ConfigError

_PARTIAL_VAR = re.compile(r"\$(\{[A-Za-z_]|[A-Za-z_])")


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str


@dataclass(frozen=True)
class UnitSources:
    fragment: SourceFile  # the unit file (FragmentPath)
    dropins: tuple[SourceFile, ...] = ()  # UNIT.d/*.conf in systemd's order
    env_files: Mapping[str, str | None] | None = None  # path -> text (None: missing); None: unreadable

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


@dataclass
class Service:
    """The parsed service: effective directives, environment files and the sglang command."""

    sources: UnitSources
    units: dict[str, UnitFile]
    exec_start: Located
    command: SglangCommand
    environment: list[tuple[Located, EnvAssignment]]
    env_file_paths: list[tuple[str, bool]]  # (path, optional)
    env_files: dict[str, EnvFile] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def lookup(self, name: str) -> VarValue:
        """The effective value of ``name``: EnvironmentFile= overrides Environment= (systemd.exec(5))."""
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

    def items(self) -> list[ArgItem]:
        """The sglang argv as sglang receives it, ``$VAR`` references expanded."""
        items: list[ArgItem] = []
        path = self.exec_start.path
        anchor = self.exec_start.directive.first_line.start
        prev_end = self.command.entry.file_span[1]
        for word in self.command.args:
            var = shell_var(word) if self.command.shell else word.split_var
            if var is None and not self.command.shell and word.text.startswith("${") and word.text.endswith("}"):
                var = word.braced_vars[0] if len(word.braced_vars) == 1 else None
            if var is not None:
                items.extend(self._expand(var, word.file_span))
            elif _PARTIAL_VAR.search(word.text):
                items.append(ArgItem(word.text, None, path, self.command.kind, word.file_span, prev_end, anchor))
            else:
                items.append(ArgItem(word.text, word.chars, path, self.command.kind, word.file_span, prev_end, anchor))
            prev_end = word.file_span[1]
        return items

    def _expand(self, name: str, span: tuple[int, int]) -> list[ArgItem]:
        value = self.lookup(name)
        if value.unknown is not None:
            return [ArgItem(f"${name}", None, self.exec_start.path, value.where, span, None, 0, value.unknown)]
        if value.assignment is None or value.path is None:
            return []  # unset: expands to nothing
        where = f"{value.where} (${name})"
        out: list[ArgItem] = []
        prev: int | None = None
        for word in words_of(value.assignment.value):
            word_span = word.span_of(0, len(word))
            out.append(ArgItem(word.text, word, value.path, where, word_span, prev, value.anchor))
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


def load_service(sources: UnitSources) -> Service:
    """Parse every source and find the one effective ``ExecStart=`` that runs sglang."""
    units = {source.path: parse_unit(source.text) for source in sources.unit_files}
    runners: list[tuple[Located, SglangCommand]] = []
    for located in _service_directives(units, sources, "ExecStart"):
        command = find_in_exec(located.directive.value)
        if command is not None:
            runners.append((located, command))
    if not runners:
        raise ConfigError("no ExecStart= runs sglang", source=sources.fragment.path)
    if len(runners) > 1:
        listed = ", ".join(_describe(located) for located, _ in runners)
        raise ConfigError(
            f"several ExecStart= lines run sglang ({listed}); edit one by hand", source=sources.fragment.path
        )
    located, command = runners[0]
    environment = [
        (env, assignment)
        for env in _service_directives(units, sources, "Environment")
        for assignment in parse_environment(env.directive.value)
    ]
    paths: list[tuple[str, bool]] = []
    for env in _service_directives(units, sources, "EnvironmentFile"):
        raw = env.directive.value.text
        paths.append((raw[1:].strip(), True) if raw.startswith("-") else (raw, False))
    service = Service(sources, units, located, command, environment, paths)
    if sources.env_files is not None:
        for path, optional in paths:
            text = sources.env_files.get(path)
            if text is None and not optional:
                raise ConfigError(f"EnvironmentFile={path} does not exist", source=sources.fragment.path)
            if text is not None:
                service.env_files[path] = parse_env_file(text)
    return service


def runs_sglang(unit_text: str) -> bool:
    """True when any ``ExecStart=`` of the unit's [Service] section runs sglang."""
    unit = parse_unit(unit_text)
    return any(find_in_exec(d.value) is not None for d in unit.directives_in("Service", "ExecStart"))
