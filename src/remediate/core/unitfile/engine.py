"""PURE: which engine a unit runs — one answer for every step of a run.

The truth is what systemd loaded: ``systemctl show``'s ``ExecStart=`` (systemd's ``exec_command_dump`` of
the loaded unit), read by :func:`remediate.core.unitfile.command.engine_in_exec`. The unit's files on disk
are read only where that says nothing (no ``ExecStart=`` shown: a daemonless systemctl; a line no reader
knows), or where a daemon-reload is pending: then the disk's engine is the one the next start runs (every
change remediate makes reloads first), and where it differs from the loaded one that is said in a note.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from remediate.core.engines import DEFAULT, Engine, engine_named
from remediate.core.probe import ProbeResult
from remediate.core.unitfile.command import engine_in_exec
from remediate.core.unitfile.edit import UnitSources
from remediate.core.unitfile.sources import load_service
from remediate.errors import ConfigError


@dataclass(frozen=True)
class EngineRead:
    """The engine a unit runs and, where the loaded unit and the disk disagree, the note that says which won."""

    engine: Engine
    note: str | None = None


def loaded_engine(found: ProbeResult) -> Engine | None:
    """The engine of the loaded unit's ``ExecStart=`` (None: none shown, or none that runs an engine)."""
    if found.state is None:
        return None
    for argv in found.state.exec_argvs:
        try:
            name = engine_in_exec(shlex.join(argv))
        except ConfigError:
            continue
        if name is not None:
            return engine_named(name)
    return None


def disk_engine(sources: UnitSources | None) -> Engine | None:
    """The engine the unit's files on disk run (None: they cannot be read, or run none)."""
    if sources is None:
        return None
    try:
        return load_service(sources).engine
    except ConfigError:
        return None


def read_engine(found: ProbeResult, sources: UnitSources | None) -> EngineRead:
    """The engine ``found``'s unit runs: systemd's loaded view, the disk's where that is unknown or a reload is
    pending (said where the two differ); sglang, the default, where neither tells (the plan says why)."""
    loaded = loaded_engine(found)
    if loaded is not None and not found.needs_daemon_reload:
        return EngineRead(loaded)
    disk = disk_engine(sources)
    if disk is None:
        return EngineRead(loaded or DEFAULT)
    if loaded is not None and disk is not loaded:
        unit = found.state.unit if found.state is not None else "the unit"
        return EngineRead(
            disk,
            f"systemd has {unit} loaded running {loaded.label}, but its files on disk run {disk.label} and a "
            f"daemon-reload is pending: read as {disk.label}, the engine its next start runs",
        )
    return EngineRead(disk)
