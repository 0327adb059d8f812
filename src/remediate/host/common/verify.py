"""Verification shared by `oom` and `status`: does the running server hold what the unit now says (its resolved
arguments, its allocator environment, its pool against the targets)?"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

from remediate.core.engines import SGLANG, Engine
from remediate.core.engines.sglang.resolved import (
    HONOR_ENV,
    POST_CAPTURE_ENV,
    POST_CAPTURE_RULE,
    info_text,
    is_post_capture,
    logged_pool,
    pool_mismatch,
    resolve_fraction,
)
from remediate.core.engines.version import parse_server_version
from remediate.core.numbers import as_int
from remediate.core.startup import STARTUP_LINES_ERE, StartupNumbers, parse_startup, tokens_from_info
from remediate.core.unitfile.alloc import ALLOC, ALLOC_NEW, missing_options
from remediate.core.unitfile.edit import DesiredState, UnitEdit, UnitSources
from remediate.core.unitfile.guard import guard_alloc
from remediate.core.unitfile.report import flag_values, summary_lines, unified_diff
from remediate.core.unitfile.sources import load_service
from remediate.errors import ConfigError, RemediationError
from remediate.host.common.environ import ServerEnv, read_server_env
from remediate.host.common.facts import startup_lines
from remediate.host.common.health import Healthy
from remediate.host.common.options import RunOptions
from remediate.host.common.outcome import record_settings
from remediate.models import HostResult
from remediate.transport.base import Transport


def fill_plan(result: HostResult, plan: UnitEdit) -> None:
    record_settings(result, plan.before, plan.after)
    result.diff = "".join(unified_diff(f.path, f.old_text, f.new_text) for f in plan.files)
    result.summary = summary_lines(plan)
    result.notes.extend(plan.notes)  # after any note of the --auto plan
    result.changed = plan.is_changed


def verify_server_args(
    host: str,
    info: dict[str, Any] | None,
    plan: UnitEdit,
    *,
    env: Mapping[str, str | None] | None = None,
    context_len: int | None = None,
    version: tuple[int, ...] | None = None,
    notes: list[str] | None = None,
) -> dict[str, str]:
    """The server that answers must run the values we wrote (its resolved ServerArgs are in the info
    document). Catches a restart that did not take — and another server answering on that port.
    sglang's fraction is compared with what sglang resolves it to (core/engines/sglang/resolved.py: the aiter
    factor), from the unit's ``env`` and the server's own report; what the factor did is added to ``notes``.
    Returns the flags it compared (and found equal)."""
    checked: dict[str, str] = {}
    if not info:
        return checked
    for key, want in flag_values(plan.after).items():
        got = info.get(key)
        if want is None or got is None:
            continue
        if plan.after.engine == SGLANG.name and key == SGLANG.fraction_key:
            _verify_fraction(host, info, want, got, env or {}, context_len, version, notes)
            checked[key] = want
            continue
        try:
            same = Decimal(str(got)) == Decimal(str(want))
        except InvalidOperation:
            same = str(got) == str(want)
        if not same:
            raise RemediationError(host, _not_taken(key, got, want))
        checked[key] = want
    return checked


def _not_taken(key: str, got: object, want: str, why: str = "") -> str:
    return (
        f"the server reports {key}={got}, but the unit now sets {want}{why}: "
        "the restart did not take effect, or another server answers on that port"
    )


def _verify_fraction(
    host: str,
    info: dict[str, Any],
    want: str,
    got: object,
    env: Mapping[str, str | None],
    context_len: int | None,
    version: tuple[int, ...] | None,
    notes: list[str] | None,
) -> None:
    """sglang's resolved ``mem_fraction_static`` against the value the unit's written one resolves to."""
    context = context_len if context_len is not None else as_int(info.get("context_length"), text=True)
    if version is None and (own := parse_server_version(SGLANG.name, info)) is not None:
        version = own.release  # the server's own report (http_server.py get_server_info: "version": __version__)
    resolved = resolve_fraction(
        want, attention_backend=info_text(info, "attention_backend"), context_len=context, env=env, version=version
    )
    try:
        reported = Decimal(str(got))
    except InvalidOperation:
        reported = None
    if resolved is None or reported is None:
        if str(got) != str(want):
            raise RemediationError(host, _not_taken(SGLANG.fraction_key, got, want))
        return
    if not resolved.explains(reported):
        expected = resolved.expected.normalize()
        why = f" (which sglang resolves to {expected})" if resolved.expected != resolved.written else ""
        raise RemediationError(host, _not_taken(SGLANG.fraction_key, got, want, why))
    note = resolved.note(reported)
    if note is not None and notes is not None and note not in notes:
        notes.append(note)


def unit_env(sources: UnitSources, names: tuple[str, ...] = (HONOR_ENV, POST_CAPTURE_ENV)) -> dict[str, str | None]:
    """The unit's effective values of ``names`` (Environment=, EnvironmentFile=, UnsetEnvironment=; a container's
    ``-e`` is not read): empty when the unit does not parse."""
    try:
        service = load_service(sources)
    except ConfigError:
        return {}
    found: dict[str, str | None] = {}
    for name in names:
        value = service.lookup(name)
        found[name] = value.assignment.value.text if value.assignment is not None else None
    return found


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


def env_readable(sources: UnitSources) -> bool:
    """Not for a container: its environment is the engine's to give (``-e``), and the host-side process (the
    docker client, conmon) never holds it."""
    try:
        return not load_service(sources).command.in_container
    except ConfigError:
        return False


def server_env(transport: Transport, unit: str, sources: UnitSources) -> ServerEnv | None:
    """The server process's environment (None for a container, :func:`env_readable`), found by its engine's
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
        result.max_req_input_len = longest
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


def guard_desired(sources: UnitSources, desired: DesiredState) -> DesiredState:
    """The desired state ``plan_edit`` really plans for this unit, so the server is verified against it: no
    expandable segments where the unit's sglang refuses them (core/unitfile/guard.py)."""
    try:
        service = load_service(sources)
    except ConfigError:
        return desired  # plan_edit says why
    return replace(desired, alloc_conf=guard_alloc(service, desired.alloc_conf)[0])


def read_started(transport: Transport, unit: str, since_epoch: float | None) -> StartupNumbers:
    """sglang's start since ``since_epoch`` (the restart): its startup lines, one journal read bounded by it."""
    return parse_startup(startup_lines(transport, unit, STARTUP_LINES_ERE, since_epoch=since_epoch))


def logged_pool_problem(startup: StartupNumbers, info: dict[str, Any] | None) -> str | None:
    """The pool a start logged against the one its ``/server_info`` reports: why they disagree, or None (they
    agree, or either is unknown)."""
    reported = tokens_from_info(info) if info else None
    return pool_mismatch(logged_pool(startup.post_capture_tokens, startup.kv_tokens, startup.is_kv_pool), reported)


def resolution_notes(
    info: dict[str, Any] | None, written: str | None, env: Mapping[str, str | None], startup: StartupNumbers | None
) -> list[str]:
    """What sglang does to the unit's values before running them, named for `status` and `plan`: the aiter factor
    (when the server's report shows it in play) and post-capture KV sizing (asked in the unit, or seen in the
    journal)."""
    notes: list[str] = []
    got = (info or {}).get(SGLANG.fraction_key)
    if written is not None and got is not None:
        resolved = resolve_fraction(
            written,
            attention_backend=info_text(info, "attention_backend"),
            context_len=as_int((info or {}).get("context_length"), text=True),
            env=env,
        )
        try:
            note = resolved.note(Decimal(str(got))) if resolved is not None else None
        except InvalidOperation:
            note = None
        if note is not None:
            notes.append(note)
    if is_post_capture(env) or (startup is not None and startup.post_capture_tokens is not None):
        notes.append(POST_CAPTURE_RULE)
    return notes
