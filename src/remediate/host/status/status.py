"""`status` on one host: the same read as `oom`, the plan computed but not applied; a remediated unit whose
running server lacks a setting is ``drift``."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from remediate.core.probe import ProbeResult
from remediate.core.startup import tokens_from_info
from remediate.core.unitfile.dropin import plan_instance_edit
from remediate.core.unitfile.edit import UnitEdit, UnitSources
from remediate.errors import RemediationError
from remediate.host.common.facts import fetch_metrics_info, fetch_server_info, fetch_tokens, startup_lines
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import endpoint_of, engine_of, run_read_only
from remediate.host.common.verify import (
    env_problems,
    fill_plan,
    guard_desired,
    resolution_notes,
    server_env,
    unit_env,
    verify_server_args,
)
from remediate.host.common.version import (
    package_version,
    read_engine_version,
    version_notes,
    with_version_default,
)
from remediate.models import HostResult, StatusReport, UnitState
from remediate.transport.base import Transport


def _status_drift(
    transport: Transport,
    unit: str,
    sources: UnitSources,
    info: dict[str, Any] | None,
    plan: UnitEdit,
    options: RunOptions,
    result: HostResult,
) -> None:
    """A remediated unit whose running server lacks a setting is ``drift`` in `status` too (read-only)."""
    drift: list[str] = []
    try:
        verify_server_args(result.host, info, plan, env=unit_env(sources), notes=result.notes)
    except RemediationError as exc:
        drift.append(exc.message)
    alloc_conf = guard_desired(sources, options.desired).alloc_conf
    if alloc_conf:
        drift += env_problems(server_env(transport, unit, sources), alloc_conf)
    if drift:
        result.outcome = "drift"
        result.drift = tuple(drift)
        result.warnings.append(f"drift: {'; '.join(drift)}; `remediate oom {result.host}` restarts it")


def _name_resolution(sources: UnitSources, info: dict[str, Any] | None, plan: UnitEdit, result: HostResult) -> None:
    """What sglang makes of the unit's values (the aiter factor, post-capture KV sizing), from its report and the
    unit (core/engines/sglang/resolved.py); no journal read: `status` stays one round trip per fact."""
    for note in resolution_notes(info, plan.before.mem_fraction_static, unit_env(sources), None):
        if note not in result.notes:
            result.notes.append(note)


def status_host(
    transport: Transport,
    options: RunOptions,
    *,
    label: str | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """Read-only: the unit, its state, current settings, tokens, and whether it is remediated."""

    def body(found: ProbeResult, sources: UnitSources, result: HostResult) -> None:
        state = found.state
        assert state is not None
        # a unit that sets no fraction: the default of the release its restart runs (the package the probe listed)
        desired = with_version_default(options.desired, package_version(found, engine_of(found)))
        plan = plan_instance_edit(sources, desired, now=datetime.fromtimestamp(now(), tz=UTC))
        fill_plan(result, plan)
        result.outcome = "unchanged"  # read-only: nothing was changed
        result.status = StatusReport(
            remediated=not plan.is_changed,
            state=UnitState(state.active_state, state.get("SubState"), state.n_restarts),
            need_daemon_reload=found.needs_daemon_reload,
        )
        if state.needs_daemon_reload:
            result.warnings.append("NeedDaemonReload=yes: the running server does not use the unit on disk")
        elif found.unloaded_dropins:
            listed = ", ".join(found.unloaded_dropins)
            result.warnings.append(f"drop-in not loaded yet ({listed}): the running server does not use it")
        engine = engine_of(found)
        result.engine = engine.name
        read_info: dict[str, Any] | None = None
        if state.active_state == "active" and not engine.info_paths:
            # No endpoint reports the pool (vLLM): the current start's capacity line in the journal.
            # /metrics (vLLM's vllm:cache_config_info) says what the server runs at, and its pool when the startup
            # line is gone from the journal
            reported = fetch_metrics_info(transport, *endpoint_of(found, options), engine)
            tokens = engine.capacity(startup_lines(transport, state.unit, engine.startup_lines_ere))
            if tokens is None and reported is not None:
                tokens = tokens_from_info(reported)
            result.max_total_num_tokens = tokens
            result.target_tokens = options.target_tokens
            if not plan.is_changed and not state.needs_daemon_reload:
                _status_drift(transport, state.unit, sources, reported, plan, options, result)
        elif state.active_state == "active":
            info, _ = fetch_server_info(transport, *endpoint_of(found, options))
            tokens = tokens_from_info(info) if info else fetch_tokens(transport, *endpoint_of(found, options))[0]
            result.max_total_num_tokens = tokens
            result.target_tokens = options.target_tokens
            _name_resolution(sources, info, plan, result)
            if not plan.is_changed and not state.needs_daemon_reload:
                _status_drift(transport, state.unit, sources, info, plan, options, result)
            read_info = info or {}  # asked already: not again for the version
        result.engine_version = read_engine_version(transport, found, options, info=read_info)
        result.warnings += version_notes(sources, result.engine_version)

    return run_read_only(transport, options, body, label=label, now=now)
