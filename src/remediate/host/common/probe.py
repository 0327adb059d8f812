"""Read one host in one round trip (``templates/probe.sh.j2``) and turn what was read into the core's input."""

from __future__ import annotations

import time
from collections.abc import Callable

import yaml

from remediate.core.engines import Engine
from remediate.core.probe import SHOW_PROPERTIES, ProbeResult, dropin_order, parse_probe
from remediate.core.unitfile.argv import server_endpoint
from remediate.core.unitfile.command import ServerCommand
from remediate.core.unitfile.config import ConfigRead
from remediate.core.unitfile.edit import SourceFile, UnitSources
from remediate.core.unitfile.engine import EngineRead, read_engine
from remediate.core.unitfile.ports import host_endpoint
from remediate.core.unitfile.sources import load_service, server_args
from remediate.errors import ConfigError, SeveralUnitsError, TransportError
from remediate.host.common import templates
from remediate.host.common.options import SMI_TIMEOUT_S, RunOptions
from remediate.host.common.outcome import host_outcome, new_result, record_unit
from remediate.models import HostResult
from remediate.transport.base import Transport

MAX_CONFIG_BYTES = 1 << 20  # a server's option file is a few KiB; anything near this is not one


def probe_script(
    unit: str | None,
    extra_files: tuple[str, ...] = (),
    *,
    journal_lines: int = 0,
    journal_since: str | None = None,
    smi_timeout: int = SMI_TIMEOUT_S,
    **lock: object,
) -> str:
    """``templates/probe.sh.j2``: read everything needed to plan (``journal_lines``: also the crash evidence,
    the journal's last lines and nvidia-smi, each query bounded by ``smi_timeout`` s, for diagnose); with
    ``lock_dir``/``lock_wait`` it takes the unit's lock first and keeps it while its stdin stays open
    (:func:`remediate.host.common.lock.locked_read`)."""
    return templates.render(
        "probe.sh.j2",
        unit=unit or "",
        properties=SHOW_PROPERTIES,
        extra_files=extra_files,
        journal_lines=journal_lines,
        journal_since=journal_since,
        smi_timeout=int(smi_timeout),
        **lock,
    )


def probe(
    transport: Transport,
    unit: str | None,
    extra_files: tuple[str, ...] = (),
    *,
    journal_lines: int = 0,
    journal_since: str | None = None,
    smi_timeout: int = SMI_TIMEOUT_S,
) -> ProbeResult:
    """Read everything needed to plan, in one round trip, without the lock."""
    script = probe_script(
        unit, extra_files, journal_lines=journal_lines, journal_since=journal_since, smi_timeout=smi_timeout
    )
    result = transport.run("bash -s", stdin=script, timeout=60)
    if not result.ok and "@@end" not in result.stdout:
        raise TransportError(transport.host, f"probe failed (exit {result.exited}): {result.stderr.strip()}")
    return parse_probe(result.stdout, unit)


def resolve_unit(transport: Transport, found: ProbeResult, unit: str | None) -> ProbeResult:
    """The unit to work on: the one given, or the single unit whose ExecStart runs sglang or vLLM."""
    if unit:
        state = found.state
        if state is None or not state.fragment_path:
            raise ConfigError(f"unit {unit} not found", source=transport.host)
        return found
    if not found.candidates:
        raise ConfigError("no systemd unit runs sglang or vLLM; pass --unit", source=transport.host)
    if len(found.candidates) > 1:
        raise SeveralUnitsError(found.candidates, source=transport.host)
    return found


def read_unit(
    transport: Transport,
    unit: str | None,
    already: ProbeResult | None = None,
    *,
    journal_lines: int = 0,
    journal_since: str | None = None,
    smi_timeout: int = SMI_TIMEOUT_S,
) -> tuple[ProbeResult, UnitSources]:
    """Probe the unit (or the one running sglang) — unless ``already`` read under the lock — and build the
    core's input from what was read."""
    if already is None:
        already = probe(
            transport, unit, journal_lines=journal_lines, journal_since=journal_since, smi_timeout=smi_timeout
        )
    found = resolve_unit(transport, already, unit)
    return found, sources_from_probe(found)


def sources_from_probe(found: ProbeResult) -> UnitSources:
    """Build the core's input from what the probe read (fragment, drop-ins, environment files)."""
    state = found.state
    assert state is not None
    fragment = found.files.get(state.fragment_path)
    if fragment is None or not fragment.exists:
        raise ConfigError(f"cannot read unit file {state.fragment_path}", source=state.unit)
    dropins = tuple(
        SourceFile(path=p, text=found.files[p].text)
        for p in dropin_order(state.dropin_paths, found.unloaded_dropins)
        if p in found.files and found.files[p].exists
    )
    env_files: dict[str, str | None] = {}
    for path, remote in found.files.items():
        if path == state.fragment_path or path in state.dropin_paths or path in found.unloaded_dropins:
            continue
        if path in found.config_paths:
            continue
        env_files[path] = remote.text if remote.exists else None
    configs = {p: load_config(found.files[p].text, p) if found.files[p].exists else None for p in found.config_paths
               if p in found.files}  # fmt: skip
    return UnitSources(
        fragment=SourceFile(path=fragment.path, text=fragment.text),
        dropins=dropins,
        env_files=env_files,
        unit_name=state.unit or None,  # sglang@a.service: for %i in the unit and its EnvironmentFile= paths
        config_files=configs,  # the --config YAML files the unit names (core/unitfile/config.py)
    )


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses anchors' aliases (the file is another user's input: a few lines of them
    expand to gigabytes)."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, "aliases are not read", event.start_mark)
        return super().compose_node(parent, index)


def load_config(text: str, path: str) -> ConfigRead:
    """A server's ``--config`` YAML as its engine loads it (``yaml.safe_load``; an empty file is no options, a
    root that is no mapping is refused: sglang's "Config file must contain a dictionary at root level"), bounded
    in size and without aliases; what cannot be used is one line naming the file."""
    if len(text.encode("utf-8", "surrogateescape")) > MAX_CONFIG_BYTES:
        return ConfigRead(error=f"--config {path} is over {MAX_CONFIG_BYTES} bytes; not read")
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader without aliases
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        return ConfigRead(error=f"--config {path}{where}: {getattr(exc, 'problem', None) or 'not YAML'}")
    if data is None:
        return ConfigRead({})
    if not isinstance(data, dict):
        return ConfigRead(error=f"--config {path} must hold a mapping at its top level")
    return ConfigRead(data)


def endpoint_of(found: ProbeResult, options: RunOptions) -> tuple[str, int]:
    """Where the server listens as seen from the host: its ``--host``/``--port``; the host's ``server_port``
    setting (inventory) only when the command line names no port — the unit's own flag is where the server
    really listens (an inventory default of 30000 must not send the health wait to the wrong port).

    Read from ``systemctl show``'s argv, or — where that still holds ``$VAR``/``${VAR}`` (systemd expands
    them only at exec) — from the unit's command line expanded as systemd does (``$SGLANG_ARGS`` from an
    EnvironmentFile=).

    A server in a docker/podman container is reached through the port its ``-p``/``--publish`` maps the
    server's port to (``--network host``: the same port); a container the host cannot reach is a ConfigError.
    """
    assert found.state is not None
    engine = engine_of(found)
    fallback = options.server_port or engine.default_port
    if "ExecStart" not in found.state.properties and (command := _command(found)) is not None:
        # A daemonless systemctl shows no ExecStart= (systemd always does): the unit's own command line.
        host, port = server_endpoint(server_args(sources_from_probe(found)), fallback)
        return host_endpoint(command.ports, host, port) if command.ports is not None else (host, port)
    for argv in found.state.exec_argvs:
        if any(engine.name in word for word in argv):
            command = _command(found)
            if command is not None and command.ports is not None:
                host, port = server_endpoint(server_args(sources_from_probe(found)), fallback)
                return host_endpoint(command.ports, host, port)
            if any("$" in word for word in argv) or "--config" in argv:
                # $VAR: expanded as systemd does; --config FILE: its words come first and the command line's win
                # (sglang ConfigArgumentMerger.merge_config_with_args, vLLM FlexibleArgumentParser
                # ._pull_args_from_config): a port only the YAML sets is where the server listens
                try:
                    argv = tuple(server_args(sources_from_probe(found)))
                except ConfigError:
                    pass
            return server_endpoint(argv, fallback)
    return server_endpoint((), fallback)  # no server ExecStart: the engine's own defaults


def engine_of(found: ProbeResult) -> Engine:
    """The engine the unit runs — every step's one answer: what systemd loaded, the disk's where a
    daemon-reload is pending (core/unitfile/engine.py; :func:`engine_read` carries the note saying so)."""
    return engine_read(found).engine


def engine_read(found: ProbeResult) -> EngineRead:
    """:func:`engine_of` with its note (where the loaded unit and the disk disagree)."""
    try:
        sources: UnitSources | None = sources_from_probe(found)
    except ConfigError:
        sources = None
    return read_engine(found, sources)


def _command(found: ProbeResult) -> ServerCommand | None:
    """The unit's server command as the core reads it, or None where it cannot be read (the plan says why)."""
    try:
        return load_service(sources_from_probe(found)).command
    except ConfigError:
        return None


def run_read_only(
    transport: Transport,
    options: RunOptions,
    body: Callable[[ProbeResult, UnitSources, HostResult], None],
    *,
    label: str | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """One read-only run on a host (``status``, ``backups``): connect, read the unit without the lock, then
    ``body(found, sources, result)``; a RemediateError becomes the returned result, never raised."""
    result = new_result(label or transport.host, now)
    with host_outcome(result, now):
        transport.open()
        found, sources = read_unit(transport, options.unit)
        record_unit(result, found, sources)
        body(found, sources, result)
    return result
