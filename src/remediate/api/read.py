"""The API of the read-only commands: `status`, `diagnose`, `backups`, `bench`, `plan`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from remediate.api.hosts import TransportFactory, _default_transport, for_each_host
from remediate.fleet import budget as fleet_budget
from remediate.fleet import sweep
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest
from remediate.fleet.settings import (
    run_options_for,
)
from remediate.host.diagnose import DEFAULT_LINES, diagnose_host, parse_since
from remediate.host.restore import backups_host
from remediate.host.runner import status_host
from remediate.models import HostResult
from remediate.transport.base import SSHOptions, Transport


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


def bench(targets: Sequence[str] = (), **kw: Any) -> list[sweep.HostBench]:
    """`remediate bench`: :func:`remediate.fleet.sweep.bench` (``options``, ``progress``…), SSH by default."""
    return sweep.bench(targets, **{"transport_factory": _default_transport, **kw})


def plan(targets: Sequence[str] = (), *, inventory: str | None = None, **kw: Any) -> list[HostResult]:
    """`remediate plan`, read-only (``kw``: ssh, transport_factory and fleet.budget.plan_job's options)."""
    ssh, factory = kw.pop("ssh", None) or SSHOptions(), kw.pop("transport_factory", None)
    return for_each_host(targets, inventory, ssh, fleet_budget.plan_job(**kw), transport_factory=factory)
