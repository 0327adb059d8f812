"""PURE: a template's instances — the template an instance comes from, and systemctl's listing of them.

``sglang@0-3.service`` and ``sglang@4-7.service`` are instances of ``sglang@.service`` (systemd.unit(5),
"template"). ``oom --all-instances`` changes the template once and restarts its running instances one after
another, the instance named on the command line (the canary) first.
"""

from __future__ import annotations

from dataclasses import dataclass

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
