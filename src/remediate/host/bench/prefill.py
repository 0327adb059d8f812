"""`oom --probe TOKENS` on one host: checked against the context length before the commit, run after it.

A probe that cannot succeed on any server (longer than the model's context) is a typo, refused before the
host is touched (ConfigError, exit 2), so a rollout stops at its first host instead of restarting every
host twice. After the restart only a crash of the server fails the change (the rollback path); a probe
that fails while the server lives on (a timeout, a 503, a 400 for its length) is reported as a warning:
the server is healthy and verified, and the probe's own failure is no reason to restart it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remediate.core.engines import SGLANG, Engine
from remediate.core.probe import ServiceState
from remediate.core.unitfile.edit import UnitSources
from remediate.core.unitfile.sources import server_args
from remediate.errors import ConfigError, RemediationError
from remediate.host.bench.bench import bench_engine, probe_prefill
from remediate.host.common.facts import read_state
from remediate.host.common.options import RunOptions
from remediate.host.common.outcome import Timer
from remediate.models import HostResult, ProbeReport
from remediate.transport.base import Transport


def _flag_int(args: list[str], flag: str) -> int | None:
    value: str | None = None
    for i, word in enumerate(args):
        if word == flag and i + 1 < len(args):
            value = args[i + 1]
        elif word.startswith(flag + "="):
            value = word.split("=", 1)[1]
    return int(value) if value is not None and value.isdigit() else None


def context_length(
    transport: Transport, sources: UnitSources, endpoint: tuple[str, int], engine: Engine = SGLANG
) -> tuple[int | None, str]:
    """The longest sequence the server takes: the unit's ``engine.context_option`` (sglang's ``--context-length``,
    vLLM's ``--max-model-len``), else what the running server says (sglang: its info document's
    ``context_length``; vLLM: the ``max_model_len`` of ``/v1/models``); (None, "") where neither is known."""
    name = engine.context_option
    try:
        flag = _flag_int(server_args(sources), name)
    except ConfigError:
        flag = None
    if flag:
        return flag, f"the unit's {name}"
    return bench_engine(engine).running_context(transport, endpoint)


def check_probe(
    transport: Transport, sources: UnitSources, endpoint: tuple[str, int], options: RunOptions, engine: Engine = SGLANG
) -> None:
    """Refuse (exit 2, nothing written) a --probe longer than the context: no server could take it."""
    tokens = options.probe_tokens
    if not tokens:
        return
    limit, source = context_length(transport, sources, endpoint, engine)
    if limit is not None and tokens + 1 > limit:
        raise ConfigError(
            f"--probe {tokens:,} + 1 generated token exceeds the context length {limit:,} ({source}): "
            "no server can take it; nothing was changed",
            source=transport.host,
        )


def _died(before: ServiceState, after: ServiceState) -> bool:
    return (
        after.active_state != "active"
        or after.get("SubState") == "auto-restart"
        or bool(before.main_pid and after.main_pid != before.main_pid)
        or after.n_restarts > before.n_restarts
        or bool(before.invocation_id and after.invocation_id != before.invocation_id)
    )


def run_probe(
    transport: Transport,
    unit: str,
    endpoint: tuple[str, int],
    options: RunOptions,
    result: HostResult,
    info: dict[str, Any] | None,
    timer: Timer,
    now: Callable[[], float],
    engine: Engine = SGLANG,
) -> None:
    """``--probe TOKENS``: the crashing request, once healthy. Its failure fails the change only when the
    server died (unit failed or restarting, another MainPID or InvocationID): that is the rollback path."""
    tokens = options.probe_tokens
    if not tokens:
        return
    with timer.phase("probe"):
        before, _ = read_state(transport, unit, newest_line=False)
        try:
            result.probe = probe_prefill(
                transport, unit, endpoint, tokens, info=info, seed=int(now()), timeout=options.timeout,
                engine=engine,
            )  # fmt: skip
        except RemediationError as exc:
            after, _ = read_state(transport, unit, newest_line=False)
            if _died(before, after):
                raise
            result.probe = ProbeReport(tokens, ok=False, error=exc.message)
            result.warnings.append(
                f"--probe {tokens:,} failed but the server did not crash ({exc.message}): it stays, verified"
            )
