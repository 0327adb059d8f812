"""The long-context sweep of one host, through its SSH connection (read-only on the unit).

For each context length, short to long: the engine's cache flush (sglang's ``POST /flush_cache``: its 400
"requests are running" skips the point), then one streamed request of exactly N token ids (greedy,
``ignore_eos``, ``gen`` new tokens; sglang's ``/generate``, vLLM's ``/v1/completions``: host/bench/server.py,
the engine seam), timed as the bytes arrive. Lengths the server cannot take are skipped with
the reason; the first failure stops the sweep, and if the server died the result says how (the unit's
state, the journal's OOM lines) and points to ``remediate diagnose``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remediate.core.bench.sweep import (
    DEFAULT_GEN,
    POOL_MARGIN,
    BenchPoint,
    HostBench,
    check_counts,
    mask_info,
    prompt_ids,
    safe_id_range,
    skip_reason,
)
from remediate.core.diagnosis.explain import explain_crash
from remediate.core.engines import SGLANG, VLLM, Engine
from remediate.core.probe import ServiceState
from remediate.errors import RemediateError, RemediationError, UnhealthyError
from remediate.host.bench.bench_sglang import SGLANG_BENCH
from remediate.host.bench.bench_vllm import VLLM_BENCH
from remediate.host.bench.server import BenchEngine, Server
from remediate.host.common.facts import journal_since, read_state
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import engine_of, probe, resolve_unit
from remediate.models import ProbeReport
from remediate.transport.base import Transport

# The engine seam's bench side (host/bench/server.py), one per engine registered in core/engines/.
BENCH_ENGINES: Mapping[str, BenchEngine] = {SGLANG.name: SGLANG_BENCH, VLLM.name: VLLM_BENCH}
PointFn = Callable[[HostBench, BenchPoint], None]
RequestFn = Callable[[str, int, int], None]  # (host, requested tokens, run number from 1, warm-ups included)


@dataclass(frozen=True)
class BenchOptions:
    """What to sweep on each host."""

    contexts: tuple[int, ...]
    gen: int = DEFAULT_GEN
    runs: int = 1
    warmup: int = 0
    seed: int = 0
    margin: int = POOL_MARGIN
    unit: str | None = None
    server_port: int | None = None
    request_timeout: float = 600.0
    death_wait: float = 15.0  # how long a failed request's server may take to show it died


def bench_host(
    transport: Transport,
    options: BenchOptions,
    *,
    label: str | None = None,
    on_point: PointFn | None = None,
    on_request: RequestFn | None = None,
    now: Callable[[], float] = time.time,
) -> HostBench:
    """Sweep one host. Never raises RemediateError: it lands in the result (``error``, ``exit_code``)."""
    bench = HostBench(host=label or transport.host, started_at=now())
    try:
        _sweep(transport, options, bench, on_point, on_request)
    except RemediateError as exc:
        bench.error = str(exc)
        bench.exit_code = exc.exit_code
        if isinstance(exc, UnhealthyError) and exc.journal:
            bench.journal = exc.journal
    finally:
        bench.finished_at = now()
    return bench


def bench_engine(engine: Engine) -> BenchEngine:
    """The engine's requests for the sweep and ``--probe``."""
    return BENCH_ENGINES[engine.name]


def _sweep(
    transport: Transport,
    options: BenchOptions,
    bench: HostBench,
    on_point: PointFn | None,
    on_request: RequestFn | None,
) -> None:
    transport.open()
    found = resolve_unit(transport, probe(transport, options.unit), options.unit)
    state = found.state
    assert state is not None
    unit = bench.unit = state.unit
    engine = engine_of(found)
    bench.backend = engine.name
    side = bench_engine(engine)
    host, port = side.endpoint(found, RunOptions(server_port=options.server_port))
    bench.endpoint = f"{host}:{port}"
    if state.active_state != "active":
        raise _down(transport, bench, state, found.now, f"{unit} is {state.active_state} ({state.get('SubState')})")
    server = side.server(transport, (host, port), label=bench.host, gen=options.gen, timeout=options.request_timeout)
    bench.limits = server.limits
    bench.server_info = mask_info(server.info)
    id_range = safe_id_range(bench.limits.vocab_size)
    sent = 0
    for requested in options.contexts:
        reason = skip_reason(requested, options.gen, bench.limits, options.margin)
        if reason:
            point = BenchPoint(requested, "skipped", reason)
        else:
            point, sent = _measure(server, requested, options, id_range, sent, on_request, bench.host)
        bench.points.append(point)
        died = _died(transport, unit, state, (host, port), options.death_wait) if point.status == "failed" else None
        if died:
            point.note = f"{point.note}; the server died"
        if on_point:
            on_point(bench, point)
        if died:
            raise _down(transport, bench, died, found.now, f"the server died at {requested:,} tokens")
        if point.status == "failed":
            raise RemediationError(bench.host, f"{requested:,} tokens failed: {point.note}; the sweep stops here")


def _measure(
    server: Server,
    requested: int,
    options: BenchOptions,
    id_range: tuple[int, int],
    sent: int,
    on_request: RequestFn | None,
    label: str,
) -> tuple[BenchPoint, int]:
    """One length: (warm-ups +) runs, each after a cache flush. Returns the point and the requests sent so far."""
    point = BenchPoint(requested, "ok")
    notes: list[str] = []
    for run in range(options.warmup + options.runs):
        flushed, why = server.flush()
        if flushed == "busy":
            return BenchPoint(requested, "skipped", why), sent
        if flushed == "failed":
            point.status, point.note = "failed", why
            return point, sent
        if flushed == "note":
            _add(notes, why)
        if on_request:
            on_request(label, requested, run + 1)
        ids = prompt_ids(requested, seed=options.seed, index=sent, id_range=id_range)
        sent += 1
        metrics = server.send(ids)
        if not metrics.ok:
            point.runs.append(metrics)
            point.status = "failed"
            notes.insert(0, metrics.error or "failed")
            break
        if run >= options.warmup:
            point.runs.append(metrics)
            for problem in check_counts(requested, metrics):
                _add(notes, problem)
    point.note = "; ".join(notes)
    return point, sent


def _add(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)


def _died(
    transport: Transport, unit: str, before: ServiceState, endpoint: tuple[str, int], wait: float
) -> ServiceState | None:
    """The unit's state if its server died (failed, restarting, another PID), None if it still serves.

    A killed server's connection drops a moment before systemd sees the exit, so this polls briefly."""
    deadline = time.monotonic() + wait
    while True:
        state, _ = read_state(transport, unit)
        if (
            state.active_state != "active"
            or state.get("SubState") == "auto-restart"
            or (before.main_pid and state.main_pid != before.main_pid)
            or state.n_restarts > before.n_restarts
        ):
            return state
        if transport.http_get(*endpoint, "/health").status == 200:
            return None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def _down(transport: Transport, bench: HostBench, state: ServiceState, since: float, what: str) -> UnhealthyError:
    """The error for a dead server: its state, the journal's OOM lines, and where to look next."""
    lines = journal_since(transport, state.unit, since - 5 if since else None)
    journal = explain_crash(lines)
    described = f"{state.active_state} ({state.get('SubState')}, Result={state.result})"
    message = f"{what}; {state.unit} is {described}; run `remediate diagnose {bench.host}` for the cause"
    bench.journal = journal
    return UnhealthyError(bench.host, message, journal=journal)


def probe_prefill(
    transport: Transport,
    unit: str,
    endpoint: tuple[str, int],
    tokens: int,
    *,
    info: dict[str, Any] | None,
    seed: int = 0,
    timeout: float = 600.0,
    death_wait: float = 15.0,
    engine: Engine = SGLANG,
) -> ProbeReport:
    """``oom --probe``: one prefill of exactly ``tokens`` tokens (the request that crashed the server) must
    succeed. Its failure is the server's: UnhealthyError with the journal's OOM lines, so the caller
    treats it like a failed health check (and rolls back). The engine's own requests (host/bench/server.py):
    sglang's limits from ``info`` (the health wait's), vLLM's from ``/v1/models`` and ``/metrics``."""
    server = bench_engine(engine).server(transport, endpoint, label=transport.host, gen=1, timeout=timeout,
                                         info=info or {})  # fmt: skip
    limits = server.limits
    reason = skip_reason(tokens, 1, limits, margin=0)
    if reason:
        raise RemediationError(transport.host, f"--probe {tokens:,}: the server cannot take it: {reason}")
    before, _ = read_state(transport, unit)
    clock = transport.run("date +%s")
    since = float(clock.stdout.strip()) if clock.ok and clock.stdout.strip().isdigit() else None
    ids = prompt_ids(tokens, seed=seed, index=0, id_range=safe_id_range(limits.vocab_size))
    server.flush()  # a busy or absent flush (vLLM's 404) is fine: the prompt's first id is unique anyway
    metrics = server.send(ids)
    summary = ProbeReport(
        tokens=tokens,
        ok=metrics.ok,
        prompt_tokens=metrics.prompt_tokens,
        cached_tokens=metrics.cached_tokens,
        ttft_s=None if metrics.ttft_s is None else round(metrics.ttft_s, 4),
        prefill_tok_s=None if metrics.prefill_tok_s is None else round(metrics.prefill_tok_s, 1),
    )
    if metrics.ok:
        if metrics.prompt_tokens != tokens:
            raise RemediationError(
                transport.host, f"--probe {tokens:,}: the server counted {metrics.prompt_tokens} prompt tokens"
            )
        return summary
    what = f"the probe prefill of {tokens:,} tokens failed ({metrics.error})"
    died = _died(transport, unit, before, endpoint, death_wait)
    if died:
        what += f"; {unit} is {died.active_state} ({died.get('SubState')}, Result={died.result})"
    journal = explain_crash(journal_since(transport, unit, since))
    raise UnhealthyError(transport.host, what, journal=journal)
