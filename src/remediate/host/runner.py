"""Orchestration for one host: probe → plan → commit → wait → verify, rolling back on failure.

The remote side of every step is one shell script rendered from ``templates/`` and run in one
round trip over the host's single SSH connection. Nothing here formats output for humans; the CLI
renders the :class:`~remediate.models.HostResult` this returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from remediate.core.probes import ProbeResult, tokens_from_info
from remediate.core.unitfile.edit import EditPlan, plan_edit
from remediate.core.unitfile.report import summary_lines, unified_diff
from remediate.errors import (
    RemediationError,
    UnhealthyError,
)
from remediate.host.health import Healthy, fetch_server_info, fetch_tokens, wait_healthy
from remediate.host.transaction import (
    FileWrite,
    ProgressFn,
    Timer,
    connected_and_locked,
    endpoint_of,
    host_outcome,
    planned_steps,
    read_unit,
    transact,
)
from remediate.models import HostResult, RunOptions
from remediate.transport.base import Transport


def _fill_plan(result: HostResult, plan: EditPlan) -> None:
    result.flags_before = {
        "mem_fraction_static": plan.before.mem_fraction_static,
        "chunked_prefill_size": plan.before.chunked_prefill_size,
    }
    result.flags_after = {
        "mem_fraction_static": plan.after.mem_fraction_static,
        "chunked_prefill_size": plan.after.chunked_prefill_size,
    }
    result.env_before = {"PYTORCH_CUDA_ALLOC_CONF": plan.before.alloc_conf}
    result.env_after = {"PYTORCH_CUDA_ALLOC_CONF": plan.after.alloc_conf}
    result.diff = "".join(unified_diff(f.path, f.old_text, f.new_text) for f in plan.files)
    result.summary = summary_lines(plan)
    result.notes = list(plan.notes)
    result.changed = plan.is_changed


def verify_server_args(host: str, info: dict[str, Any] | None, plan: EditPlan) -> None:
    """The server that answers must run the values we wrote (its resolved ServerArgs are in the info
    document). Catches a restart that did not take — and another server answering on that port."""
    if not info:
        return
    expected = {
        "mem_fraction_static": plan.after.mem_fraction_static,
        "chunked_prefill_size": plan.after.chunked_prefill_size,
    }
    for key, want in expected.items():
        got = info.get(key)
        if want is None or got is None:
            continue
        try:
            same = Decimal(str(got)) == Decimal(str(want))
        except InvalidOperation:
            same = str(got) == str(want)
        if not same:
            raise RemediationError(
                host,
                f"the server reports {key}={got}, but the unit now sets {want}: "
                "the restart did not take effect, or another server answers on that port",
            )


def verify_tokens(result: HostResult, healthy: Healthy, options: RunOptions) -> None:
    result.max_total_num_tokens = healthy.tokens
    result.target_tokens = options.target_tokens
    longest = (healthy.info or {}).get("max_req_input_len")
    if isinstance(longest, int):
        # A smaller KV pool silently lowers the longest prompt sglang accepts (SGLANG.md §3.2).
        result.extra["max_req_input_len"] = longest
        context = (healthy.info or {}).get("context_length")
        if isinstance(context, int) and longest < context - 6:
            result.warnings.append(
                f"prompts longer than {longest:,} tokens are now rejected (context length {context:,})"
            )
    if options.min_tokens is not None and healthy.tokens < options.min_tokens:
        raise RemediationError(
            result.host,
            f"max_total_num_tokens={healthy.tokens:,} is below --min-tokens {options.min_tokens:,}",
        )
    gap = result.token_gap
    if gap is not None and gap < 0:
        result.warnings.append(
            f"max_total_num_tokens {healthy.tokens:,} is {abs(gap) * 100:.1f}% below the target "
            f"{options.target_tokens:,}: capacity traded for stability"
        )


def _already_healthy(
    transport: Transport, found: ProbeResult, options: RunOptions, plan: EditPlan, result: HostResult
) -> tuple[int | None, bool]:
    """(tokens, stale) for a unit that needs no change: tokens when the running server runs it; stale
    when it answers with other values (edited and reloaded, never restarted), so it must restart."""
    state = found.state
    assert state is not None
    if state.active_state != "active" or state.needs_daemon_reload:
        return None, False
    info, _ = fetch_server_info(transport, *endpoint_of(found, options))
    if info is None:
        return None, False
    try:
        verify_server_args(result.host, info, plan)
    except RemediationError as exc:
        result.notes.append(f"{exc.message}; restarting to apply the unit")
        return None, True
    return tokens_from_info(info), False


def _is_running(found: ProbeResult) -> bool:
    state = found.state
    assert state is not None
    return state.active_state == "active" and state.main_pid > 0 and not state.needs_daemon_reload


def _wait_for_running(
    transport: Transport, found: ProbeResult, options: RunOptions, result: HostResult, timer: Timer
) -> int | None:
    """The unit is already remediated and running but not answering yet: it is loading (a start by hand,
    or another remediation whose lock was released after its restart). Restarting it would throw the
    load away (minutes on a real host) and make that other run roll back; wait for it instead."""
    state = found.state
    assert state is not None

    def show_progress(phase: str, elapsed: float, line: str) -> None:
        if timer.progress:
            timer.progress(result.host, "waiting", f"{phase} · {elapsed:.0f}s · {line}")

    try:
        healthy = wait_healthy(
            transport,
            state.unit,
            endpoint_of(found, options),
            timeout=options.timeout,
            restart_epoch=None,
            invocation_id=state.invocation_id or None,
            on_progress=show_progress,
        )
    except UnhealthyError as exc:
        result.notes.append(f"the running server did not get healthy ({exc})")
        return None
    return healthy.tokens


def remediate_host(
    transport: Transport,
    options: RunOptions,
    *,
    label: str | None = None,
    progress: ProgressFn | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """The whole OOM remediation of one host. Never raises RemediateError: it lands in the result."""
    result = HostResult(host=label or transport.host, started_at=now())
    timer = Timer(result, progress)
    with host_outcome(result, now):
        _remediate(transport, options, result, timer, now)
    return result


def _remediate(
    transport: Transport, options: RunOptions, result: HostResult, timer: Timer, now: Callable[[], float]
) -> None:
    with connected_and_locked(transport, options, timer) as unit:
        _remediate_locked(transport, options, unit, result, timer, now)


def _remediate_locked(
    transport: Transport,
    options: RunOptions,
    unit_name: str | None,
    result: HostResult,
    timer: Timer,
    now: Callable[[], float],
) -> None:
    from datetime import UTC, datetime

    with timer.phase("read"):
        found, sources = read_unit(transport, unit_name)
        assert found.state is not None
        unit = found.state.unit
        result.unit = unit
        result.unit_path = found.state.fragment_path
    with timer.phase("plan"):
        plan = plan_edit(sources, options.desired, now=datetime.fromtimestamp(now(), tz=UTC))
        _fill_plan(result, plan)
        epoch = int(now())
        writes = [FileWrite(f.path, f.old_text, f.new_text) for f in plan.files]
        result.steps = planned_steps(unit, writes, epoch, restart=True)
    if not plan.is_changed:
        tokens, stale = _already_healthy(transport, found, options, plan, result)
        if tokens is None and not stale and not options.dry_run and _is_running(found):
            with timer.phase("wait"):
                tokens = _wait_for_running(transport, found, options, result, timer)
        if tokens is not None:
            result.outcome = "unchanged"
            result.max_total_num_tokens = tokens
            result.target_tokens = options.target_tokens
            result.steps = []
            return
        if not stale:
            result.notes.append("the unit is already remediated but the server is not healthy: restarting it")
    if options.dry_run:
        # Nothing was changed: the outcome says so; `changed` and the diff say what a real run would do.
        result.outcome = "unchanged"
        result.extra["dry_run"] = True
        return

    def check(healthy: Healthy) -> None:
        verify_server_args(result.host, healthy.info, plan)
        verify_tokens(result, healthy, options)

    transact(
        transport,
        unit,
        writes,
        endpoint_of(found, options),
        options,
        result,
        timer,
        epoch=epoch,
        analyze=found.has_systemd_analyze,
        verify=check,
        success="remediated",
        undo_note="rolled back to the previous unit",
    )


def status_host(
    transport: Transport,
    options: RunOptions,
    *,
    label: str | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """Read-only: the unit, its state, current settings, tokens, and whether it is remediated."""
    from datetime import UTC, datetime

    result = HostResult(host=label or transport.host, started_at=now())
    with host_outcome(result, now):
        transport.open()
        found, sources = read_unit(transport, options.unit)
        assert found.state is not None
        result.unit = found.state.unit
        result.unit_path = found.state.fragment_path
        plan = plan_edit(sources, options.desired, now=datetime.fromtimestamp(now(), tz=UTC))
        _fill_plan(result, plan)
        result.outcome = "unchanged"  # read-only: nothing was changed
        state = found.state
        result.extra = {
            "remediated": not plan.is_changed,
            "active_state": state.active_state,
            "sub_state": state.get("SubState"),
            "n_restarts": state.n_restarts,
            "need_daemon_reload": state.needs_daemon_reload,
        }
        if state.needs_daemon_reload:
            result.warnings.append("NeedDaemonReload=yes: the running server does not use the unit on disk")
        if state.active_state == "active":
            tokens, _ = fetch_tokens(transport, *endpoint_of(found, options))
            result.max_total_num_tokens = tokens
            result.target_tokens = options.target_tokens
    return result
