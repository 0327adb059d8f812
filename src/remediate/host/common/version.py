"""The engine's version on one host (core/engines/version.py reads each source): the running server's own
report where it answers, else vLLM's startup line in the journal lines already read, else the engine's package
in the unit's interpreter, which the probe listed in its round trip (templates/probe.sh.j2 ``@@dists``).

At most one bounded GET (transport/http1.py), and only to an active unit: sglang's server-info document is
usually fetched already (pass it as ``info``), vLLM's ``/version`` is a few bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from remediate.core.engines import Engine, engine_named
from remediate.core.engines.version import (
    EngineVersion,
    first_known,
    parse_dist_version,
    parse_log_version,
    parse_server_version,
)
from remediate.core.probe import ProbeResult
from remediate.core.unitfile.edit import DesiredState, UnitSources
from remediate.core.unitfile.sources import server_args
from remediate.errors import ConfigError
from remediate.host.common.facts import fetch_json
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import endpoint_of, engine_of
from remediate.transport.base import Transport


def package_version(found: ProbeResult, engine: Engine) -> EngineVersion | None:
    """The engine's package in the unit's interpreter, as the probe listed it (None: not found)."""
    return parse_dist_version(engine.name, found.sections.get("dists", ()))


def server_version(
    transport: Transport, found: ProbeResult, options: RunOptions, info: Mapping[str, Any] | None = None
) -> EngineVersion | None:
    """The running server's own report (None: the unit is not active, or the server does not answer)."""
    state = found.state
    if state is None or state.active_state != "active":
        return None
    engine = engine_of(found)
    if engine.version_path is None:  # its info document carries the version (sglang's server info)
        if info is None:
            info, _ = fetch_json(transport, *endpoint_of(found, options), *engine.info_paths)
        return parse_server_version(engine.name, info)
    document, _ = fetch_json(transport, *endpoint_of(found, options), engine.version_path)
    return parse_server_version(engine.name, document)


def read_engine_version(
    transport: Transport,
    found: ProbeResult,
    options: RunOptions,
    *,
    info: Mapping[str, Any] | None = None,
    journal: Iterable[str] = (),
) -> EngineVersion | None:
    """The best version there is: the server's, else the journal's (vLLM), else the package's."""
    engine = engine_of(found)
    return first_known(
        server_version(transport, found, options, info),
        parse_log_version(engine.name, journal),
        package_version(found, engine),
    )


def with_version_default(desired: DesiredState, version: EngineVersion | None) -> DesiredState:
    """``desired`` with the running version's own default fraction (vLLM's --gpu-memory-utilization) for a unit
    that sets none (None: the engine's table default stands)."""
    default_at = engine_named(version.engine).default_fraction_at if version is not None else None
    if version is None or default_at is None:
        return desired
    default = default_at(version.release)
    return desired if default is None else desired.with_fraction_default(Decimal(str(default)))


def version_notes(sources: UnitSources, version: EngineVersion | None) -> list[str]:
    """What the detected sglang release says of the flags the unit writes (refused at the next start,
    deprecated): core/engines/sglang/flags.py ``flag_problems``; nothing for an unknown release."""
    engine = engine_named(version.engine) if version is not None else None
    if version is None or engine is None or engine.flag_problems_at is None:
        return []
    try:
        words = server_args(sources)
    except ConfigError:
        return []  # the plan says why the unit cannot be read
    return engine.flag_problems_at(list(words), version.release or None, f"{engine.label} {version.version}")
