"""PURE: PYTORCH_CUDA_ALLOC_CONF — where sglang's value is decided, and merging options into it.

The variable is a comma-separated ``key:value`` list: wanted options are set (``expandable_segments:False``
flips to ``True``) and every other option (``max_split_size_mb:512``) stays where it was.
"""

from __future__ import annotations

from remediate.core.unitfile.envfile import EnvAssignment
from remediate.core.unitfile.model import TextEdit
from remediate.core.unitfile.sources import Service

ALLOC = "PYTORCH_CUDA_ALLOC_CONF"


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


def alloc_target(service: Service) -> tuple[EnvAssignment | None, str, str]:
    """The assignment that decides PYTORCH_CUDA_ALLOC_CONF for sglang: (assignment, path, where)."""
    command = service.command
    path = service.exec_start.path
    if command.in_container:
        env = [a for a in command.container_env if a.name == ALLOC]
        return (env[-1] if env else None), path, f"{command.kind} -e"
    prefix = [a for a in command.env_prefix if a.name == ALLOC]
    if prefix:
        return prefix[-1], path, command.kind if command.shell else "ExecStart= (env)"
    value = service.lookup(ALLOC)
    if value.unknown is not None:
        service.notes.append(f"{ALLOC} could also be set in {value.where}, which was not read")
    if value.assignment is not None and value.path is not None:
        return value.assignment, value.path, value.where
    return None, path, "Environment="
