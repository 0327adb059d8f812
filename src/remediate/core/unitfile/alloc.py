"""PURE: the PyTorch allocator variables — where sglang's value is decided, and merging options into it.

The value is a comma-separated ``key:value`` list: wanted options are set (``expandable_segments:False``
flips to ``True``) and every other option (``max_split_size_mb:512``) stays where it was. Torch ≥ 2.9
reads ``PYTORCH_ALLOC_CONF`` first (the old name is deprecated): where a unit sets it, the options are
merged into it too, so both names agree whichever torch runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from remediate.core.alloc_conf import ALLOC as ALLOC
from remediate.core.alloc_conf import ALLOC_NEW as ALLOC_NEW
from remediate.core.alloc_conf import EXPANDABLE as EXPANDABLE
from remediate.core.alloc_conf import has_expandable as has_expandable
from remediate.core.alloc_conf import missing_options as missing_options
from remediate.core.unitfile.envfile import EnvAssignment
from remediate.core.unitfile.model import TextEdit
from remediate.core.unitfile.sources import Service
from remediate.errors import ConfigError


@dataclass(frozen=True)
class AllocTarget:
    """Where a variable's effective value lives (``assignment``), or where a new one goes (``insert``)."""

    assignment: EnvAssignment | None
    path: str
    where: str
    insert: str  # "container" (a ``-e`` after ``run``) or "environment" (an ``Environment=`` line)


def merge_alloc(assignment: EnvAssignment, wanted: str) -> tuple[list[TextEdit], str]:
    """Edits that make the comma-separated ``key:value`` list hold every wanted option."""
    value = assignment.value.text
    edits: list[TextEdit] = []
    appended: list[str] = []
    options: list[tuple[str, int, int]] = []  # (key, value start, value end) in ``value``
    pos = 0
    for part in value.split(","):
        key, colon, _ = part.partition(":")
        if colon:
            options.append((key.strip(), pos + len(key) + 1, pos + len(part)))
        pos += len(part) + 1
    merged = value
    for option in wanted.split(","):
        key, _, new = option.partition(":")
        existing = [opt for opt in options if opt[0] == key]
        if existing:
            _, start, end = existing[-1]
            if value[start:end].strip() != new:
                edits.append(assignment.replace_value(start, end, new))
                merged = merged.replace(f"{key}:{value[start:end]}", f"{key}:{new}")
        else:
            appended.append(option)
    if appended:
        extra = ",".join(appended)
        sep = "," if value.strip() else ""
        edits.append(assignment.replace_value(len(value), len(value), sep + extra))
        merged = merged + sep + extra
    return edits, merged


def alloc_target(service: Service, name: str = ALLOC, *, notes: bool = True) -> AllocTarget:
    """The place that decides ``name`` for sglang: the last wrapper/script assignment, else the unit's
    environment (systemd.exec(5) order). Raises ConfigError where a value set there would never arrive."""
    command = service.command
    path = service.exec_start.path
    inherited = False
    for op in reversed(command.env_ops):
        if op.kind == "set" and op.name == name and op.assignment is not None:
            return AllocTarget(op.assignment, path, op.where, "container" if command.in_container else "environment")
        if op.kind == "unset" and op.name == name:
            raise ConfigError(
                f"`{op.where} {name}` in ExecStart= removes {name}, so remediate cannot set it; edit by hand",
                source=path,
            )
        if op.kind == "inherit" and op.name == name:
            inherited = True  # docker -e NAME: the container gets the unit's value
            break
        if op.kind == "note" and notes:
            note = f"{op.where} could also set {name}; it was not read"
            if note not in service.notes:
                service.notes.append(note)
        if op.kind == "clear" and name not in (op.name or "").split(","):
            if command.in_container:
                return AllocTarget(None, path, f"{command.kind} -e", "container")
            raise ConfigError(
                f"`{op.where}` in ExecStart= clears the environment, so {name} from the unit never reaches "
                "sglang; set it after that wrapper by hand",
                source=path,
            )
    value = service.lookup(name)
    if value.removed is not None:
        raise ConfigError(
            f"UnsetEnvironment= at {value.removed} removes {name}, so an Environment= for it is ignored; edit by hand",
            source=value.removed.rsplit(":", 1)[0],
        )
    if value.unknown is not None and notes:
        note = f"{name} could also be set in {value.where}, which was not read"
        if note not in service.notes:
            service.notes.append(note)
    if value.assignment is not None and value.path is not None:
        return AllocTarget(value.assignment, value.path, value.where, "environment")
    where = "Environment=" if inherited or not command.in_container else f"{command.kind} -e"
    return AllocTarget(None, path, where, "environment" if where == "Environment=" else "container")


def alloc_value(service: Service, name: str = ALLOC) -> str | None:
    """The effective value of ``name`` for sglang, or None (unset, or unknowable)."""
    try:
        target = alloc_target(service, name)
    except ConfigError:
        return None
    return target.assignment.value.text if target.assignment is not None else None


@dataclass(frozen=True)
class AllocChange:
    name: str
    old: str | None
    new: str
    path: str
    where: str


def _insertion(service: Service, target: AllocTarget, name: str, value: str) -> tuple[str, TextEdit]:
    """A new ``-e NAME=VALUE`` after ``run``, or an ``Environment=`` line after the last one (or [Service])."""
    path = target.path
    run = service.command.container_run
    if target.insert == "container" and run is not None:
        point = run.file_span[1]
        return path, TextEdit(point, point, f" -e {name}={value}")
    unit = service.units[path]
    envs = unit.directives_in("Service", "Environment")
    line = f"Environment={name}={value}"
    if envs:
        last = envs[-1].last_line
    else:
        headers = [h for section, h in unit.section_headers if section == "Service"]
        exec_line = service.exec_start.directive.first_line.number
        last = [h for h in headers if h.number < exec_line][-1]
    if last.eol and last.eol != "\0":
        return path, TextEdit(last.full_end, last.full_end, line + last.eol)
    return path, TextEdit(last.end, last.end, unit.eol + line)  # before a NUL: systemd ends the line there


def plan_alloc(service: Service, wanted: str) -> tuple[list[tuple[str, TextEdit]], list[AllocChange]]:
    """Edits that give sglang ``wanted`` in both allocator variables where they are set (pure)."""
    edits: list[tuple[str, TextEdit]] = []
    changes: list[AllocChange] = []
    merged_new: str | None = None
    try:
        new_target: AllocTarget | None = alloc_target(service, ALLOC_NEW, notes=False)
    except ConfigError:
        new_target = None  # removed or cleared: torch falls back to the old name
    if new_target is not None and new_target.assignment is not None:
        found, merged_new = merge_alloc(new_target.assignment, wanted)
        edits += [(new_target.path, edit) for edit in found]
        if found:
            old = new_target.assignment.value.text
            changes.append(AllocChange(ALLOC_NEW, old, merged_new, new_target.path, new_target.where))
    target = alloc_target(service, ALLOC)
    if target.assignment is not None:
        found, merged = merge_alloc(target.assignment, wanted)
        edits += [(target.path, edit) for edit in found]
        if found:
            changes.append(AllocChange(ALLOC, target.assignment.value.text, merged, target.path, target.where))
        return edits, changes
    value = merged_new or wanted  # agree with PYTORCH_ALLOC_CONF where the unit sets it
    edits.append(_insertion(service, target, ALLOC, value))
    changes.append(AllocChange(ALLOC, None, value, target.path, target.where))
    return edits, changes
