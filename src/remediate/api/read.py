"""The API of the read-only commands: `status`, `diagnose`, `backups`, `plan` (and `plan --offline`); `bench`
is api/sweep.py's.

Each host's work imports its host module on its first call: by then the first hosts' connections are under
way (fleet/jobs.py ``for_each_host``), and their handshakes overlap the import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from remediate.api.hosts import TransportFactory, for_each_host
from remediate.core.bounds import check_options
from remediate.fleet import jobs
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest
from remediate.fleet.settings import run_options_for
from remediate.models import HostResult
from remediate.transport.base import SSHOptions, Transport

__all__ = ["backups", "diagnose", "offline_plan", "plan", "status"]


def status(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    forks: int | None = None,
    transport_factory: TransportFactory | None = None,
) -> list[HostResult]:
    """Per host: unit, state, current fraction/chunk/alloc conf, tokens, and whether it is remediated.
    ``forks``: hosts at once (None: the inventory's ``rollout: forks``, else 10)."""

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.runner import status_host
        from remediate.host.units import each_unit

        options = run_options_for(entry, OomRequest(unit=unit))
        return each_unit(transport, options, lambda t, o: status_host(t, o, label=entry.name), label=entry.name)

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, forks=forks, transport_factory=transport_factory)


def diagnose(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    lines: int | None = None,
    since: str | None = None,
    transport_factory: TransportFactory | None = None,
    smi_timeout: int | None = None,
    forks: int | None = None,
) -> list[HostResult]:
    """Read-only, no lock: each host's latest failure, why, and the `remediate oom` that fixes it. ``lines``:
    the journal lines to read (None: host/diagnose.py's DEFAULT_LINES, 2000)."""
    from remediate.host.diagnose import DEFAULT_LINES, diagnose_host, parse_since

    check_options(lines=lines, smi_timeout=smi_timeout)  # bad input fails before any host is contacted
    count = DEFAULT_LINES if lines is None else lines
    restarts, since_time = parse_since(since, count)

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.units import each_unit

        options = run_options_for(entry, OomRequest(unit=unit, smi_timeout=smi_timeout))
        return each_unit(
            transport,
            options,
            lambda t, o: diagnose_host(t, o, lines=count, since=since_time, since_restarts=restarts, label=entry.name),
            label=entry.name,
        )

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, forks=forks, transport_factory=transport_factory)


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
    forks: int | None = None,
) -> list[HostResult]:
    """List each host's backups (newest first, with the flag-level difference to the current unit);
    with ``prune_keep``, delete all but the newest N per file (never the newest, never the current state's)."""
    check_options(lock_timeout=lock_timeout)

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.restore import backups_host
        from remediate.host.units import each_unit

        options = replace(run_options_for(entry, OomRequest(unit=unit, lock_timeout=lock_timeout)), dry_run=dry_run)
        return each_unit(
            transport,
            options,
            lambda t, o: backups_host(t, o, label=entry.name, prune_keep=prune_keep),
            label=entry.name,
        )

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, forks=forks, transport_factory=transport_factory)


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
    forks: int | None = None,
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
    return for_each_host(targets, inventory, ssh or SSHOptions(), job, forks=forks, transport_factory=transport_factory)


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
    from remediate.host import budget as host_budget

    return host_budget.offline_plan(
        targets=targets,
        gpu_mem_gib=gpu_mem_gib,
        free_after_weights_gib=free_after_weights_gib,
        cell_bytes=cell_bytes,
        page_size=page_size,
        target_tokens=target_tokens,
    )
