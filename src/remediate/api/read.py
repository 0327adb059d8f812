"""The API of the read-only commands: `status`, `diagnose`, `backups`, `plan` (and `plan --offline`), `bench`.

(One module for them, not one each: a submodule ``api.bench`` would shadow the function ``api.bench``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from remediate.api.hosts import TransportFactory, _default_transport, for_each_host
from remediate.fleet import bench as fleet_bench
from remediate.fleet import jobs
from remediate.fleet.bench import DEFAULT_CONTEXTS, DEFAULT_GEN, BenchRequest, HostBench, SweepProgress
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest
from remediate.fleet.settings import (
    run_options_for,
)
from remediate.host import budget as host_budget
from remediate.host.bench import BenchOptions
from remediate.host.diagnose import DEFAULT_LINES, diagnose_host, parse_since
from remediate.host.restore import backups_host
from remediate.host.runner import status_host
from remediate.models import HostResult
from remediate.transport.base import SSHOptions, Transport

__all__ = [
    "DEFAULT_CONTEXTS",
    "DEFAULT_GEN",
    "BenchOptions",
    "BenchRequest",
    "HostBench",
    "backups",
    "bench",
    "bench_request",
    "diagnose",
    "finish_bench",
    "offline_plan",
    "plan",
    "status",
]


def status(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    transport_factory: TransportFactory | None = None,
) -> list[HostResult]:
    """Per host: unit, state, current fraction/chunk/alloc conf, tokens, and whether it is remediated."""

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        request = OomRequest(unit=unit)
        return status_host(transport, run_options_for(entry, request), label=entry.name)

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, transport_factory=transport_factory)


def diagnose(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    lines: int = DEFAULT_LINES,
    since: str | None = None,
    transport_factory: TransportFactory | None = None,
    smi_timeout: int | None = None,
) -> list[HostResult]:
    """Read-only, no lock: each host's latest failure, why, and the `remediate oom` that fixes it."""
    restarts, since_time = parse_since(since, lines)  # bad input fails before any host is contacted

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        options = run_options_for(entry, OomRequest(unit=unit, smi_timeout=smi_timeout))
        return diagnose_host(
            transport, options, lines=lines, since=since_time, since_restarts=restarts, label=entry.name
        )

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, transport_factory=transport_factory)


def backups(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    prune_keep: int | None = None,
    dry_run: bool = False,
    transport_factory: TransportFactory | None = None,
    lock_timeout: int | None = None,
) -> list[HostResult]:
    """List each host's backups (newest first, with the flag-level difference to the current unit);
    with ``prune_keep``, delete all but the newest N per file (never the newest, never the current state's)."""

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        options = replace(run_options_for(entry, OomRequest(unit=unit, lock_timeout=lock_timeout)), dry_run=dry_run)
        return backups_host(transport, options, label=entry.name, prune_keep=prune_keep)

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, transport_factory=transport_factory)


def plan(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    target_tokens: int | None = None,
    chunked_prefill_size: int | None = None,
    margin: float = 0.10,
    observations: str | None = None,
    transport_factory: TransportFactory | None = None,
) -> list[HostResult]:
    """`remediate plan`, read-only: per host, the pool and headroom per fraction and the largest that fits
    (``result.extra["plan"]``). ``observations`` is the calibration log (default: the state directory's)."""
    job = jobs.plan_job(
        unit=unit,
        target_tokens=target_tokens,
        chunked_prefill_size=chunked_prefill_size,
        margin=margin,
        observations=observations,
    )
    return for_each_host(targets, inventory, ssh or SSHOptions(), job, transport_factory=transport_factory)


def offline_plan(
    *,
    gpu_mem_gib: float | None,
    free_after_weights_gib: float | None,
    cell_bytes: float | None,
    page_size: int = 1,
    target_tokens: int | None = None,
    targets: Sequence[str] = (),
) -> dict[str, Any]:
    """`remediate plan --offline`: the plan document from numbers given, no host (``targets`` must be empty)."""
    return host_budget.offline_plan(
        targets=targets,
        gpu_mem_gib=gpu_mem_gib,
        free_after_weights_gib=free_after_weights_gib,
        cell_bytes=cell_bytes,
        page_size=page_size,
        target_tokens=target_tokens,
    )


def bench(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    options: BenchOptions | None = None,
    request: BenchRequest | None = None,
    progress: SweepProgress | None = None,
    transport_factory: TransportFactory | None = None,
) -> list[HostBench]:
    """`remediate bench`: each host's sweep (``options``: lengths, runs…, default the incident's), read-only on
    the unit; a ``request`` (:func:`bench_request`) gives targets, inventory, SSH options and options at once."""
    return fleet_bench.bench(
        targets,
        inventory=inventory,
        ssh=ssh,
        options=options,
        progress=progress,
        request=request,
        transport_factory=transport_factory or _default_transport,
    )


def bench_request(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    contexts: str = DEFAULT_CONTEXTS,
    gen: int = DEFAULT_GEN,
    runs: int = 1,
    warmup: int = 0,
    seed: int | None = None,
    output: str | None = None,
    csv_path: str | None = None,
    plot: str | None = None,
) -> BenchRequest:
    """What `remediate bench` is asked, checked: a bad length is a ConfigError naming its flag, and every output
    file (and ``plot``'s matplotlib) is checked before any host is contacted. No seed → a fresh one."""
    given = {"targets": tuple(targets), "inventory": inventory, "unit": unit, "seed": seed}
    sweep_args = {"contexts": contexts, "gen": gen, "runs": runs, "warmup": warmup}
    files = {"output": output, "csv_path": csv_path, "plot": plot}
    return fleet_bench.request_from_cli({**given, **sweep_args, **files}, ssh or SSHOptions())


def finish_bench(results: Sequence[HostBench], request: BenchRequest, *, version: str) -> int:
    """The end of `remediate bench`: write the files the request names; the exit code."""
    return fleet_bench.finish(results, request, version=version)
