"""The instance drop-in: a change to one instance of a template unit, written where only it reads (pure).

``sglang@0-3.service`` and ``sglang@4-7.service`` share ``sglang@.service`` (and its ``sglang@.service.d/``
drop-ins): an edit there changes every instance. systemd's own answer is a drop-in of the instance
(systemd.unit(5), "drop-in directories": ``/etc/systemd/system/sglang@0-3.service.d/*.conf``). When the
effective ``ExecStart=`` lives in a shared file, the change is planned in a drop-in owned by remediate:
``[Service]``, ``ExecStart=`` (which resets the list) and the effective line copied as written (its ``%i``
and ``%I`` specifiers kept, so the drop-in stays right for this instance), plus each ``Environment=`` of a
shared file that decides a variable the line reads or the alloc conf. A second run finds the drop-in and
edits it like any file. Values in a shared ``EnvironmentFile=`` still win over the drop-in, so an edit
there stays an edit of the shared file (refused by :func:`sources.refuse_template_edit`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime

from remediate.core.unitfile.alloc import ALLOC, ALLOC_NEW
from remediate.core.unitfile.edit import DesiredState, FileEdit, UnitEdit, plan_edit
from remediate.core.unitfile.model import Directive
from remediate.core.unitfile.sources import (
    Service,
    SourceFile,
    UnitSources,
    load_service,
    shared_with_instances,
)

DROPIN_NAME = "90-remediate-oom.conf"
UNIT_DIR = "/etc/systemd/system"  # the administrator's units: an instance drop-in goes here (systemd.unit(5))
MARK = "# Written by remediate (oom)"  # the first words of the drop-in: how a rollback knows it is ours
HEADER = (
    MARK + ": a drop-in for {unit} only, so the other instances of its template keep\n"
    "# their settings. The ExecStart= below replaces the template's; `remediate rollback` removes this file.\n"
)
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def dropin_path(unit_name: str) -> str:
    """Where remediate's drop-in of ``unit_name`` lives."""
    return f"{UNIT_DIR}/{unit_name}.d/{DROPIN_NAME}"


def _raw(text: str, directive: Directive) -> str:
    """The directive's lines as written (continuations and comment lines between them included)."""
    return text[directive.first_line.start : directive.last_line.end]


def _shared(service: Service, path: str) -> bool:
    return bool(shared_with_instances(service.unit_name, [path]))


def _dropin_text(service: Service) -> str:
    sources = service.sources
    texts = {source.path: source.text for source in sources.unit_files}
    located = service.exec_start
    line = _raw(texts[located.path], located.directive)
    names = [*dict.fromkeys(_VAR.findall(located.directive.value.text)), ALLOC, ALLOC_NEW]
    copied: list[str] = []
    for name in names:
        value = service.lookup(name)
        if value.where != "Environment=" or value.path is None or not _shared(service, value.path):
            continue  # set by this instance's own files, an EnvironmentFile= or not at all
        for env, assignment in service.environment:
            if assignment is value.assignment:
                raw = _raw(texts[env.path], env.directive)
                if raw not in copied:
                    copied.append(raw)
    body = "".join(f"{raw}\n" for raw in copied)
    return f"{HEADER.format(unit=service.unit_name)}[Service]\n{body}ExecStart=\n{line}\n"


def with_instance_dropin(sources: UnitSources) -> UnitSources | None:
    """``sources`` with remediate's drop-in added (as systemd would read it, in its name order), when the
    unit is a template instance whose effective ``ExecStart=`` lives in a shared file and the drop-in does
    not exist yet; None otherwise (nothing to add: the edit goes where the values are)."""
    service = load_service(sources)
    path = dropin_path(service.unit_name)
    if any(d.path == path for d in sources.dropins) or not _shared(service, service.exec_start.path):
        return None
    if not shared_with_instances(service.unit_name, [sources.fragment.path]):
        return None  # no template instance
    dropin = SourceFile(path, _dropin_text(service))
    dropins = sorted([*sources.dropins, dropin], key=lambda d: d.path.rsplit("/", 1)[-1])
    return replace(sources, dropins=tuple(dropins))


def plan_instance_edit(sources: UnitSources, desired: DesiredState, *, now: datetime) -> UnitEdit:
    """:func:`edit.plan_edit`, with the change of a template instance moved into its own drop-in where the
    template (or a shared drop-in) holds the command line. The new drop-in's :class:`FileEdit` has
    ``created`` set (its old bytes: none)."""
    augmented = with_instance_dropin(sources)
    if augmented is None:
        return plan_edit(sources, desired, now=now)
    edit = plan_edit(augmented, desired, now=now)
    path = dropin_path(augmented.unit_name or load_service(sources).unit_name)
    if not any(f.path == path for f in edit.files):
        return plan_edit(sources, desired, now=now)  # the command line needs no change: no drop-in either
    files = tuple(FileEdit(f.path, "", f.new_text, created=True) if f.path == path else f for f in edit.files)
    return replace(edit, files=files)


def created_dropin(sources: UnitSources, backed_up: list[str]) -> SourceFile | None:
    """remediate's drop-in of this instance when it was created and never edited since (no backup of it in
    ``backed_up``): what a rollback removes. None otherwise."""
    unit = sources.unit_name or load_service(sources).unit_name
    path = dropin_path(unit)
    for dropin in sources.dropins:
        if dropin.path == path and path not in backed_up and dropin.text.startswith(MARK):
            return dropin
    return None
