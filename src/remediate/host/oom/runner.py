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
from decimal import Decimal, InvalidOperation
from typing import Any

from remediate.core.engines import SGLANG, Engine
from remediate.core.probe import ProbeResult, refuse_unsafe
from remediate.core.startup import tokens_from_info
from remediate.core.unitfile.alloc import ALLOC, ALLOC_NEW, missing_options
from remediate.core.unitfile.dropin import plan_instance_edit
from remediate.core.unitfile.edit import DesiredState, UnitEdit, UnitSettings, UnitSources, plan_edit
from remediate.core.unitfile.guard import guard_alloc
from remediate.core.unitfile.report import flag_values, summary_lines, unified_diff
from remediate.core.unitfile.sources import load_service, refuse_template_edit, shared_with_instances
from remediate.errors import ConfigError, RefusedError, RemediationError, UnhealthyError
from remediate.host.bench.prefill import check_probe, run_probe
from remediate.host.common.commit import FileWrite, planned_steps
from remediate.host.common.environ import ServerEnv, read_server_env
from remediate.host.common.facts import fetch_json, fetch_server_info, fetch_tokens, startup_lines
from remediate.host.common.health import Healthy, wait_healthy
from remediate.host.common.lock import Held, run_locked
from remediate.host.common.options import RunOptions
from remediate.host.common.outcome import Timer, must_refuse, record_settings, record_unit
from remediate.host.common.probe import endpoint_of, engine_of_probe, read_unit, run_read_only
from remediate.host.common.transaction import Change, transact
from remediate.host.diagnose.diagnose import GATE_LINES, read_diagnosis_evidence, refusal
from remediate.host.instances.instances import planned_roll, roll_instances
from remediate.host.plan.plan import auto_step, floor_step
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Transport


def _fill_plan(result: HostResult, plan: UnitEdit) -> None:
    record_settings(result, plan.before, plan.after)
    result.diff = "".join(unified_diff(f.path, f.old_text, f.new_text) for f in plan.files)
    result.summary = summary_lines(plan)
    result.notes.extend(plan.notes)  # after any note of the --auto plan
    result.changed = plan.is_changed


def verify_server_args(host: str, info: dict[str, Any] | None, plan: UnitEdit) -> dict[str, str]:
    """The server that answers must run the values we wrote (its resolved ServerArgs are in the info
    document). Catches a restart that did not take — and another server answering on that port.
    Returns the flags it compared (and found equal)."""
    checked: dict[str, str] = {}
    if not info:
        return checked
    for key, want in flag_values(plan.after).items():
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
        checked[key] = want
    return checked


def env_problems(env: ServerEnv | None, wanted: str | None) -> list[str]:
    """What the running server's allocator environment lacks of ``wanted`` (empty: nothing, or not checkable).
    Both names are checked where set: torch ≥ 2.9 reads ``PYTORCH_ALLOC_CONF`` first."""
    if not wanted or env is None:
        return []
    problems = []
    for name in (ALLOC, ALLOC_NEW):
        if name != ALLOC and name not in env.values:
            continue
        missing = missing_options(env.values.get(name), wanted)
        if missing:
            got = env.values.get(name)
            held = "is unset" if got is None else f"is {got!r}"
            problems.append(f"the running server's {name} {held} ({env.source}): it lacks {','.join(missing)}")
    return problems


def verify_server_env(host: str, env: ServerEnv | None, wanted: str | None) -> None:
    """After the restart the server's own environment must hold the alloc conf the unit now sets: an
    ``Environment=`` line systemd could not parse is dropped whole, and only the environ shows it."""
    problems = env_problems(env, wanted)
    if problems:
        raise RemediationError(host, "; ".join(problems) + ": the unit's setting did not reach the server")


def _env_readable(sources: UnitSources) -> bool:
    """Not for a container: its environment is the engine's to give (``-e``), and the host-side process (the
    docker client, conmon) never holds it."""
    try:
        return not load_service(sources).command.in_container
    except ConfigError:
        return False


def _server_env(transport: Transport, unit: str, sources: UnitSources) -> ServerEnv | None:
    """The server process's environment (None for a container, :func:`_env_readable`), found by its engine's
    argv word."""
    try:
        service = load_service(sources)
    except ConfigError:
        return None
    return None if service.command.in_container else read_server_env(transport, unit, service.engine.process_entry)


def verify_tokens(result: HostResult, healthy: Healthy, options: RunOptions, engine: Engine = SGLANG) -> None:
    """The pool the server reports (sglang's max_total_num_tokens, vLLM's GPU KV cache size, both in the JSON's
    ``max_total_num_tokens``) against --min-tokens and --target-tokens."""
    result.max_total_num_tokens = healthy.tokens
    name = engine.capacity_name
    if healthy.unchecked and healthy.unchecked not in result.notes:
        result.notes.append(healthy.unchecked)  # the answer was taken as the unit's without proof: say so
    result.target_tokens = options.target_tokens
    longest = (healthy.info or {}).get("max_req_input_len")
    if isinstance(longest, int):
        # A smaller KV pool silently lowers the longest prompt sglang accepts (sglang managers/tp_worker.py:
        # max_req_len = min(context_len - 1, kv_capacity - 1), max_req_input_len = max_req_len - 5).
        result.extra["max_req_input_len"] = longest
        context = (healthy.info or {}).get("context_length")
        if isinstance(context, int) and longest < context - 6:
            result.warnings.append(
                f"prompts longer than {longest:,} tokens are now rejected (context length {context:,})"
            )
    if options.min_tokens is not None and healthy.tokens < options.min_tokens:
        raise RemediationError(
            result.host,
            f"{name}={healthy.tokens:,} is below --min-tokens {options.min_tokens:,}",
        )
    gap = result.token_gap
    if gap is not None and gap < 0:
        result.warnings.append(
            f"{name} {healthy.tokens:,} is {abs(gap) * 100:.1f}% below the target "
            f"{options.target_tokens:,}: capacity traded for stability"
        )


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
    engine = engine_of_probe(found)
    info, _ = fetch_json(transport, *endpoint, *engine.info_paths) if engine.info_paths else (None, "")
    if not engine.info_paths:
        # No document holds the pool (vLLM): /health, then the current start's capacity line in the journal.
        if transport.http_get(*endpoint, engine.health_path).status == 200:
            tokens = engine.capacity(startup_lines(transport, state.unit, engine.startup_lines_ere))
            drift = env_problems(_server_env(transport, state.unit, sources), wanted)
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
        verify_server_args(result.host, info, plan)
    except RemediationError as exc:
        return None, [exc.message]
    drift = env_problems(_server_env(transport, state.unit, sources), wanted)
    return (None, drift) if drift else (tokens_from_info(info), [])


def _check_evidence(found: ProbeResult, sources: UnitSources, options: RunOptions, result: HostResult) -> None:
    """Refuse the recipe when the latest failure contradicts it (unless --force); the JSON gets the findings."""
    evidence = read_diagnosis_evidence(found, sources, smi_timeout=options.smi_timeout)
    result.extra["findings"] = evidence.to_dict()["findings"]
    result.notes.extend(n for n in evidence.notes if n.startswith("nvidia-smi timed out"))  # a hung driver
    reason = refusal(evidence)
    if reason is None:
        return
    if must_refuse(result, reason, force=options.force, dry_run=options.dry_run):
        result.extra["recommendation"] = evidence.recommendation.to_dict()
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


def guard_desired(sources: UnitSources, desired: DesiredState) -> DesiredState:
    """The desired state ``plan_edit`` really plans for this unit, so the server is verified against it: no
    expandable segments where the unit's sglang refuses them (core/unitfile/guard.py)."""
    try:
        service = load_service(sources)
    except ConfigError:
        return desired  # plan_edit says why
    return replace(desired, alloc_conf=guard_alloc(service, desired.alloc_conf)[0])


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
        engine = engine_of_probe(found)
        result.extra["engine"] = engine.name
        _check_evidence(found, sources, options, result)
    with timer.phase("plan"):
        desired = auto_step(transport, found, sources, options, result) if options.auto else options.desired
        # --all-instances: the change goes where the values are, the template included (host/instances/instances.py).
        planner = plan_edit if options.all_instances else plan_instance_edit
        plan = planner(sources, desired, now=datetime.fromtimestamp(now(), tz=UTC))
        desired = guard_desired(sources, desired)  # what the plan holds: no alloc conf the unit's sglang refuses
        _fill_plan(result, plan)
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
            result.extra["drift"] = drift
        else:
            result.notes.append("the unit is already remediated but the server is not healthy: restarting it")
    if options.dry_run:
        # Nothing was changed: the outcome says so; `changed` and the diff say what a real run would do.
        result.outcome = "drift" if drift else "unchanged"
        result.is_dry_run = True
        return

    def check(healthy: Healthy) -> None:
        verify_server_args(result.host, healthy.info, plan)
        if desired.alloc_conf:
            # read with the wait's last look (one round trip less), else now
            env = healthy.env if healthy.env_read else _server_env(transport, unit, sources)
            verify_server_env(result.host, env, desired.alloc_conf)
        verify_tokens(result, healthy, options, engine)
        run_probe(transport, unit, endpoint_of(found, options), options, result, healthy.info, timer, now, engine)

    def check_instance(instance: str, healthy: Healthy, after: UnitSettings | None) -> None:
        """Another instance restarted on the shared file: the values it now reads (its own files may add some)."""
        if after is not None:
            verify_server_args(result.host, healthy.info, replace(plan, after=after))
            if after.alloc_conf:
                verify_server_env(result.host, _server_env(transport, instance, sources), after.alloc_conf)
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
        environ=bool(desired.alloc_conf) and _env_readable(sources),
        verify=check,
        success="drift" if drift else "remediated",
        undo_note="rolled back to the previous unit",
        engine=engine,
    )
    if shared:
        roll_instances(transport, change, found, result, timer, check_instance)
    else:
        transact(transport, change, result, timer)


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
        verify_server_args(result.host, info, plan)
    except RemediationError as exc:
        drift.append(exc.message)
    alloc_conf = guard_desired(sources, options.desired).alloc_conf
    if alloc_conf:
        drift += env_problems(_server_env(transport, unit, sources), alloc_conf)
    if drift:
        result.outcome = "drift"
        result.extra["drift"] = drift
        result.warnings.append(f"drift: {'; '.join(drift)}; `remediate oom {result.host}` restarts it")


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
        plan = plan_instance_edit(sources, options.desired, now=datetime.fromtimestamp(now(), tz=UTC))
        _fill_plan(result, plan)
        result.outcome = "unchanged"  # read-only: nothing was changed
        result.extra = {
            "remediated": not plan.is_changed,
            "active_state": state.active_state,
            "sub_state": state.get("SubState"),
            "n_restarts": state.n_restarts,
            "need_daemon_reload": found.needs_daemon_reload,
        }
        if state.needs_daemon_reload:
            result.warnings.append("NeedDaemonReload=yes: the running server does not use the unit on disk")
        elif found.unloaded_dropins:
            listed = ", ".join(found.unloaded_dropins)
            result.warnings.append(f"drop-in not loaded yet ({listed}): the running server does not use it")
        engine = engine_of_probe(found)
        result.extra["engine"] = engine.name
        if state.active_state == "active" and not engine.info_paths:
            # No endpoint reports the pool (vLLM): the current start's capacity line in the journal.
            result.max_total_num_tokens = engine.capacity(
                startup_lines(transport, state.unit, engine.startup_lines_ere)
            )
            result.target_tokens = options.target_tokens
            if not plan.is_changed and not state.needs_daemon_reload:
                _status_drift(transport, state.unit, sources, None, plan, options, result)
        elif state.active_state == "active":
            info, _ = fetch_server_info(transport, *endpoint_of(found, options))
            tokens = tokens_from_info(info) if info else fetch_tokens(transport, *endpoint_of(found, options))[0]
            result.max_total_num_tokens = tokens
            result.target_tokens = options.target_tokens
            if not plan.is_changed and not state.needs_daemon_reload:
                _status_drift(transport, state.unit, sources, info, plan, options, result)

    return run_read_only(transport, options, body, label=label, now=now)
