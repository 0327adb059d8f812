"""The long-context sweep of one host, through its SSH connection (read-only on the unit).

For each context length, short to long: ``POST /flush_cache`` (its 400 "requests are running" skips
the point), then a streamed ``/generate`` of exactly N ``input_ids`` (greedy, ``ignore_eos``,
``max_new_tokens`` = gen), timed as the bytes arrive. Lengths the server cannot take are skipped with
the reason; the first failure stops the sweep, and if the server died the result says how (the unit's
state, the journal's OOM lines) and points to ``remediate diagnose``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remediate.core.bench.latency import RequestMetrics
from remediate.core.bench.sweep import (
    DEFAULT_GEN,
    POOL_MARGIN,
    BenchPoint,
    HostBench,
    check_counts,
    generate_body,
    limits_from_info,
    mask_info,
    prompt_ids,
    safe_id_range,
    skip_reason,
)
from remediate.core.diagnosis.explain import explain_crash
from remediate.core.engines import VLLM
from remediate.core.probe import ServiceState
from remediate.errors import RemediateError, RemediationError, UnhealthyError
from remediate.host.bench.bench_vllm import reset_prefix_cache, send_completion, vllm_limits
from remediate.host.common.facts import fetch_json, fetch_server_info, journal_since, read_state, read_streamed
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import endpoint_of, engine_of, probe, resolve_unit
from remediate.host.plan.budget_vllm import vllm_endpoint
from remediate.models import ProbeReport
from remediate.transport.base import Transport
from remediate.transport.http1 import HttpStream

BUSY_NOTE = "the server is busy: /flush_cache answered 400 (requests are running or queued)"
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


def _get_json(transport: Transport, host: str, port: int, *paths: str) -> dict[str, Any] | None:
    return fetch_json(transport, host, port, *paths)[0]


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
    is_vllm = engine_of(found) is VLLM
    run_options = RunOptions(server_port=options.server_port)
    host, port = vllm_endpoint(found, run_options) if is_vllm else endpoint_of(found, run_options)
    bench.endpoint = f"{host}:{port}"
    if state.active_state != "active":
        raise _down(transport, bench, state, found.now, f"{unit} is {state.active_state} ({state.get('SubState')})")
    server = (
        _vllm(transport, (host, port), options, bench) if is_vllm else _sglang(transport, (host, port), options, bench)
    )
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


@dataclass(frozen=True)
class _Server:
    """One engine's side of the sweep: the cache flush before each request — ("ok" | "busy" | "failed" | "note",
    why) — and one streamed request of exact ids."""

    flush: Callable[[], tuple[str, str]]
    send: Callable[[list[int]], RequestMetrics]


def _sglang(transport: Transport, endpoint: tuple[str, int], options: BenchOptions, bench: HostBench) -> _Server:
    """sglang: ``/server_info`` (+ ``/model_info``) for the limits, ``POST /flush_cache``, a streamed ``/generate``."""
    host, port = endpoint
    info, _ = fetch_server_info(transport, host, port)
    if info is None:
        raise RemediationError(bench.host, f"the server at {host}:{port} does not answer /server_info; is it up?")
    model_info = _get_json(transport, host, port, "/model_info", "/get_model_info")
    bench.limits = limits_from_info(info, model_info)
    bench.server_info = mask_info(info)

    def flush() -> tuple[str, str]:
        answer = transport.http_post(host, port, "/flush_cache")
        if answer.status == 400:
            return "busy", BUSY_NOTE
        if answer.status is None:
            return "failed", f"no answer to POST /flush_cache: {answer.error or 'refused'}"
        if answer.status != 200:
            return "note", f"/flush_cache answered {answer.status} (not flushed; unique prompts miss the cache anyway)"
        return "ok", ""

    def send(ids: list[int]) -> RequestMetrics:
        body = json.dumps(generate_body(ids, options.gen), separators=(",", ":")).encode()
        with transport.http_stream(host, port, "/generate", body, timeout=options.request_timeout) as stream:
            return read_generate(stream)

    return _Server(flush, send)


def _vllm(transport: Transport, endpoint: tuple[str, int], options: BenchOptions, bench: HostBench) -> _Server:
    """vLLM: ``/v1/models`` and ``/metrics`` for the limits, ``POST /reset_prefix_cache``, ``/v1/completions``."""
    bench.limits, info, model = vllm_limits(transport, *endpoint)
    bench.server_info = mask_info(info)
    return _Server(
        lambda: reset_prefix_cache(transport, *endpoint),
        lambda ids: send_completion(transport, endpoint, ids, options.gen, model, options.request_timeout),
    )


def _measure(
    server: _Server,
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


def read_generate(stream: HttpStream) -> RequestMetrics:
    """The metrics of one streamed ``/generate`` answer (or why it has none)."""
    return read_streamed(stream, "/generate")


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
    vllm: bool = False,
) -> ProbeReport:
    """``oom --probe``: one prefill of exactly ``tokens`` tokens (the request that crashed the server) must
    succeed. Its failure is the server's: UnhealthyError with the journal's OOM lines, so the caller
    treats it like a failed health check (and rolls back). sglang: ``/flush_cache`` then ``/generate``; vLLM:
    its limits from ``/v1/models`` and ``/metrics``, ``/reset_prefix_cache``, a streamed ``/v1/completions``."""
    host, port = endpoint
    model = None
    if vllm:
        limits, _, model = vllm_limits(transport, host, port)
    else:
        limits = limits_from_info(info or {})
    reason = skip_reason(tokens, 1, limits, margin=0)
    if reason:
        raise RemediationError(transport.host, f"--probe {tokens:,}: the server cannot take it: {reason}")
    before, _ = read_state(transport, unit)
    clock = transport.run("date +%s")
    since = float(clock.stdout.strip()) if clock.ok and clock.stdout.strip().isdigit() else None
    ids = prompt_ids(tokens, seed=seed, index=0, id_range=safe_id_range(limits.vocab_size))
    if vllm:  # a 404 (no VLLM_SERVER_DEV_MODE) is fine, as a busy flush is: the prompt's first id is unique anyway
        reset_prefix_cache(transport, host, port)
        metrics = send_completion(transport, endpoint, ids, 1, model, timeout)
    else:
        transport.http_post(host, port, "/flush_cache")
        body = json.dumps(generate_body(ids, 1), separators=(",", ":")).encode()
        with transport.http_stream(host, port, "/generate", body, timeout=timeout) as stream:
            metrics = read_generate(stream)
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
