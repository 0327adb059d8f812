"""Orchestration for one host: probe → plan → commit → wait → verify, rolling back on failure.

The remote side of every step is one shell script rendered from ``templates/`` and run in one
round trip over the host's single SSH connection. Nothing here formats output for humans; the CLI
renders the :class:`~remediate.models.HostResult` this returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from remediate.core.probe import ProbeResult, refuse_unsafe
from remediate.core.startup import tokens_from_info
from remediate.core.unitfile.dropin import plan_instance_edit
from remediate.core.unitfile.edit import UnitEdit, UnitSettings, UnitSources, plan_edit
from remediate.core.unitfile.sources import refuse_template_edit, shared_with_instances
from remediate.errors import RefusedError, RemediationError, UnhealthyError
from remediate.host.bench.prefill import check_probe, run_probe
from remediate.host.common.commit import FileWrite, planned_steps
from remediate.host.common.facts import fetch_json, fetch_metrics_info, fetch_server_info, startup_lines
from remediate.host.common.health import Healthy, wait_healthy
from remediate.host.common.lock import Held, run_locked
from remediate.host.common.options import RunOptions
from remediate.host.common.outcome import Timer, must_refuse, record_unit
from remediate.host.common.probe import endpoint_of, engine_of, read_unit
from remediate.host.common.transaction import Change, transact
from remediate.host.common.verify import (
    env_problems,
    env_readable,
    fill_plan,
    guard_desired,
    logged_pool_problem,
    read_started,
    server_env,
    unit_env,
    verify_server_args,
    verify_server_env,
    verify_tokens,
)
from remediate.host.common.version import package_version, with_version_default
from remediate.host.diagnose.diagnose import GATE_LINES, read_diagnosis_evidence, refusal
from remediate.host.instances.instances import planned_roll, roll_instances
from remediate.host.plan.plan import auto_step, floor_step
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Transport


def _already_healthy(
    transport: Transport,
    found: ProbeResult,
    sources: UnitSources,
    options: RunOptions,
    plan: UnitEdit,
    result: HostResult,
    wanted: str | None,
    timer: Timer,
) -> tuple[int | None, list[str]]:
    """(tokens, drift) for a unit that needs no change: tokens when the running server runs it; drift
    (what it lacks) when it answers with other values or lacks the alloc conf (edited and reloaded, never
    restarted), so it must restart."""
    state = found.state
    assert state is not None
    if state.active_state not in ("active", "activating") or found.needs_daemon_reload:
        return None, []
    endpoint = endpoint_of(found, options)
    engine = engine_of(found)
    info, _ = fetch_json(transport, *endpoint, *engine.info_paths) if engine.info_paths else (None, "")
    if not engine.info_paths:
        # No document holds the pool (vLLM): /health, then the current start's capacity line in the journal, else
        # /metrics, which also says what the server runs at (its utilization, against the unit's).
        if transport.http_get(*endpoint, engine.health_path).status == 200:
            reported = fetch_metrics_info(transport, *endpoint, engine)
            tokens = engine.capacity(startup_lines(transport, state.unit, engine.startup_lines_ere))
            if tokens is None and reported is not None:  # the startup line gone from the journal
                tokens = tokens_from_info(reported)
            try:
                verify_server_args(result.host, reported, plan)
            except RemediationError as exc:
                return None, [exc.message]
            drift = env_problems(server_env(transport, state.unit, sources), wanted)
            return (None, drift) if drift or tokens is None else (tokens, [])
        return None, []
    if info is None:
        # Still loading — e.g. a run killed during its wait left this server starting: wait for it (a real
        # load is minutes) instead of restarting it; a crash or a timeout means it needs the restart.
        try:
            info = wait_healthy(
                transport,
                state.unit,
                endpoint,
                timeout=options.timeout,
                restart_epoch=None,
                invocation_id=state.invocation_id or None,
                engine=engine,
                sleep=timer.sleep,
            ).info
        except UnhealthyError:
            return None, []
        if info is None:
            return None, []
    try:
        verify_server_args(result.host, info, plan, env=unit_env(sources), notes=result.notes)
    except RemediationError as exc:
        return None, [exc.message]
    drift = env_problems(server_env(transport, state.unit, sources), wanted)
    return (None, drift) if drift else (tokens_from_info(info), [])


def _check_evidence(found: ProbeResult, sources: UnitSources, options: RunOptions, result: HostResult) -> None:
    """Refuse the recipe when the latest failure contradicts it (unless --force); the JSON gets the findings."""
    evidence = read_diagnosis_evidence(found, sources, smi_timeout=options.smi_timeout)
    result.findings = evidence.findings_json()
    result.notes.extend(n for n in evidence.notes if n.startswith("nvidia-smi timed out"))  # a hung driver
    reason = refusal(evidence)
    if reason is None:
        return
    if must_refuse(result, reason, force=options.force, dry_run=options.dry_run):
        result.recommendation = evidence.recommendation.to_dict()
        raise RefusedError(result.host, f"refusing the OOM recipe: {reason} (see `remediate diagnose`; --force)")


def remediate_host(
    transport: Transport,
    options: RunOptions,
    *,
    label: str | None = None,
    progress: ProgressFn | None = None,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> HostResult:
    """The whole OOM remediation of one host. Never raises RemediateError: it lands in the result. ``now`` and
    ``sleep``: its clock (tests pass fixed ones)."""

    def body(held: Held, result: HostResult, timer: Timer) -> None:
        _remediate_locked(transport, options, held, result, timer, now)

    return run_locked(
        transport, options, body, label=label, progress=progress, now=now, sleep=sleep, journal_lines=GATE_LINES
    )


def _remediate_locked(
    transport: Transport,
    options: RunOptions,
    held: Held,
    result: HostResult,
    timer: Timer,
    now: Callable[[], float],
) -> None:
    with timer.phase("read"):
        found, sources = read_unit(
            transport, held.unit, held.found, journal_lines=GATE_LINES, smi_timeout=options.smi_timeout
        )
        unit = record_unit(result, found, sources).unit
        engine = engine_of(found)
        result.engine = engine.name
        _check_evidence(found, sources, options, result)
    with timer.phase("plan"):
        desired = auto_step(transport, found, sources, options, result) if options.auto else options.desired
        # a unit that sets no fraction: the default of the release its restart runs (the package the probe listed)
        desired = with_version_default(desired, package_version(found, engine))
        # --all-instances: the change goes where the values are, the template included (host/instances/instances.py).
        planner = plan_edit if options.all_instances else plan_instance_edit
        plan = planner(sources, desired, now=datetime.fromtimestamp(now(), tz=UTC))
        desired = guard_desired(sources, desired)  # what the plan holds: no alloc conf the unit's sglang refuses
        fill_plan(result, plan)
        floor_step(transport, found, plan, options, result)
        shared = shared_with_instances(unit, [f.path for f in plan.files]) if options.all_instances else []
        if not shared:
            refuse_template_edit(unit, [f.path for f in plan.files], flag="--all-instances")  # before any change
            if options.all_instances and plan.is_changed:
                result.notes.append(f"--all-instances: the change is {unit}'s own; no other unit is restarted")
        elif options.dry_run:
            result.notes.append(planned_roll(transport, unit))
        refuse_unsafe(found, [f.path for f in plan.files], transport.host)
        epoch = int(now())
        writes = [FileWrite(f.path, f.old_text, f.new_text, old_absent=f.created) for f in plan.files]
        result.steps = planned_steps(
            unit, writes, epoch, restart=True, lock_wait=options.lock_wait, capacity=engine.capacity_name
        )
        check_probe(transport, sources, endpoint_of(found, options), options, engine)  # a typo stops here
    drift: list[str] = []
    if not plan.is_changed:
        tokens, drift = _already_healthy(transport, found, sources, options, plan, result, desired.alloc_conf, timer)
        if tokens is not None:
            result.outcome = "unchanged"
            result.max_total_num_tokens = tokens
            result.target_tokens = options.target_tokens
            result.steps = []
            if not options.dry_run and options.probe_tokens:
                info, _ = fetch_server_info(transport, *endpoint_of(found, options))
                run_probe(transport, unit, endpoint_of(found, options), options, result, info, timer, now, engine)
            return
        if drift:
            # The unit is right, the running server is not: restart it under the same verified transaction.
            fix = f"`remediate oom {result.host}` restarts it" if options.dry_run else "restarting it"
            result.notes.append(f"drift: {'; '.join(drift)}; the unit on disk is right: {fix}")
            result.drift = tuple(drift)
        else:
            result.notes.append("the unit is already remediated but the server is not healthy: restarting it")
    if options.dry_run:
        # Nothing was changed: the outcome says so; `changed` and the diff say what a real run would do.
        result.outcome = "drift" if drift else "unchanged"
        result.is_dry_run = True
        return

    def check(healthy: Healthy) -> None:
        # sglang: this start's lines (bounded by the restart's epoch) give the context length the aiter factor
        # depends on, and the pool it logged
        started = read_started(transport, unit, epoch) if engine.info_paths and healthy.source != "journal" else None
        context = started.context_len if started is not None else None
        verify_server_args(
            result.host, healthy.info, plan, env=unit_env(sources), context_len=context, notes=result.notes
        )
        if not engine.info_paths:  # vLLM: what /metrics says it runs at (vllm:cache_config_info)
            verify_server_args(result.host, fetch_metrics_info(transport, *endpoint_of(found, options), engine), plan)
        if desired.alloc_conf:
            # read with the wait's last look (one round trip less), else now
            env = healthy.env if healthy.env_read else server_env(transport, unit, sources)
            verify_server_env(result.host, env, desired.alloc_conf)
        verify_tokens(result, healthy, options, engine)
        problem = logged_pool_problem(started, healthy.info) if started is not None else None
        if problem is not None:
            result.warnings.append(problem)  # another server answering?
        run_probe(transport, unit, endpoint_of(found, options), options, result, healthy.info, timer, now, engine)

    def check_instance(instance: str, healthy: Healthy, after: UnitSettings | None) -> None:
        """Another instance restarted on the shared file: the values it now reads (its own files may add some)."""
        if after is not None:
            verify_server_args(
                result.host, healthy.info, replace(plan, after=after), env=unit_env(sources), notes=result.notes
            )
            if after.alloc_conf:
                verify_server_env(result.host, server_env(transport, instance, sources), after.alloc_conf)
        if options.min_tokens is not None and healthy.tokens < options.min_tokens:
            raise RemediationError(result.host, f"max_total_num_tokens={healthy.tokens:,} is below --min-tokens")

    change = Change(
        unit=unit,
        writes=tuple(writes),
        endpoint=endpoint_of(found, options),
        options=options,
        epoch=epoch,
        analyze=found.has_systemd_analyze,
        fragment=found.state.fragment_path if found.state is not None else "",
        environ=bool(desired.alloc_conf) and env_readable(sources),
        verify=check,
        success="drift" if drift else "remediated",
        undo_note="rolled back to the previous unit",
        engine=engine,
    )
    if shared:
        roll_instances(transport, change, found, result, timer, check_instance)
    else:
        transact(transport, change, result, timer)
