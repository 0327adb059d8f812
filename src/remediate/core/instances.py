"""PURE: a template's instances — the template an instance comes from, and systemctl's listing of them.

``sglang@0-3.service`` and ``sglang@4-7.service`` are instances of ``sglang@.service`` (systemd.unit(5),
"template"). ``oom --all-instances`` changes the template once and restarts its running instances one after
another, the instance named on the command line (the canary) first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from remediate.core.backups import settings_or_none, swap
from remediate.core.unitfile.edit import UnitSettings, UnitSources
from remediate.core.unitfile.report import env_values, flag_values

RUNNING = frozenset({"active", "activating", "reloading"})  # ActiveState values of a unit whose process runs


@dataclass(frozen=True)
class Instance:
    """One loaded instance of a template, as `systemctl list-units` showed it."""

    unit: str
    load_state: str
    active_state: str
    sub_state: str

    @property
    def is_running(self) -> bool:
        return self.active_state in RUNNING


def template_of(unit: str) -> str | None:
    """``sglang@0-3.service`` → ``sglang@.service``; None for a unit that is no template instance."""
    stem, dot, suffix = unit.rpartition(".")
    prefix, at, instance = stem.partition("@")
    if not (dot and at and prefix and instance):
        return None
    return f"{prefix}@.{suffix}"


def instances_pattern(template: str) -> str:
    """The `systemctl list-units` pattern of a template's instances: ``sglang@.service`` → ``sglang@*.service``."""
    prefix, _, suffix = template.rpartition("@.")
    return f"{prefix}@*.{suffix}"


def parse_instances(text: str, template: str) -> tuple[Instance, ...]:
    """The ``@@instance NAME LOAD ACTIVE SUB`` lines of ``templates/instances.sh.j2``: the template's loaded
    instances, by name (a ``not-found`` unit, one of another template, and a repeated name are left out)."""
    found: dict[str, Instance] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 5 or words[0] != "@@instance":
            continue
        name, load, active, sub = words[1:5]
        if template_of(name) != template or load == "not-found":
            continue
        found.setdefault(name, Instance(name, load, active, sub))
    return tuple(sorted(found.values(), key=lambda i: i.unit))


def roll_order(instances: tuple[Instance, ...], canary: str) -> list[str]:
    """The order the instances are restarted in: the canary first (whether or not systemd listed it: it is
    the instance the run was asked about), then the others by name."""
    return [canary, *(i.unit for i in instances if i.unit != canary)]


def settings_after(
    sources: UnitSources, new_texts: Mapping[str, str]
) -> tuple[UnitSettings | None, UnitSettings | None]:
    """One instance's managed settings before and after the shared files get ``new_texts`` (a file it does
    not read is skipped); None where they cannot be read."""
    files = {sources.fragment.path, *(d.path for d in sources.dropins), *(sources.env_files or {})}
    after = sources
    for path, text in new_texts.items():
        if path in files:
            after = swap(after, path, text)
    return settings_or_none(sources), settings_or_none(after)


def is_reached(before: UnitSettings | None, after: UnitSettings | None) -> bool:
    """Whether the change reaches an instance: its managed flags or environment differ (an instance whose own
    drop-in sets them is not reached; unreadable settings count as reached: it is restarted and checked)."""
    if before is None or after is None:
        return True
    return (flag_values(before), env_values(before)) != (flag_values(after), env_values(after))
