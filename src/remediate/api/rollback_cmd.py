"""The API of `rollback` (a rollout) and `backups` (list, prune)."""

from __future__ import annotations

from collections.abc import Callable

from remediate.api.hosts import (
    RolloutResult,
    TransportFactory,
    check_results_kept,
    for_each_host,
    given_hosts,
    transports,
)
from remediate.errors import ConfigError
from remediate.fleet import jobs
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import BackupsRequest, RollbackRequest
from remediate.fleet.settings import build_strategy, resolve_hosts, unit_options_for
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Transport

__all__ = ["BackupsRequest", "RollbackRequest", "backups", "rollback"]


def rollback(
    request: RollbackRequest,
    *,
    transport_factory: TransportFactory | None = None,
    progress: ProgressFn | None = None,
    confirm: Callable[[str], bool] | None = None,
    retry_dir: str | None = None,
) -> RolloutResult:
    """Restore each host's latest backup (or ``to``); a rollback over a group is a rollout too. The request's
    ``hosts``: the hosts themselves, already resolved (the watcher's, as polled): ``targets`` are not resolved
    again."""
    inventory, hosts = given_hosts(request.hosts, request.inventory) or resolve_hosts(
        request.targets, request.inventory
    )
    if request.to != "latest" and len(hosts) > 1:
        raise ConfigError("--to PATH names one file: use it with one host")
    strategy = build_strategy(request.strategy, inventory)
    options = {
        h.name: unit_options_for(
            h,
            request.unit,
            timeout=request.timeout,
            lock_timeout=request.lock_timeout,
            dry_run=request.dry_run,
            all_instances=request.all_instances,
        )
        for h in hosts
    }
    if not request.dry_run:
        check_results_kept(inventory, retry_dir, request.retry_file)
    return jobs.roll_out(
        jobs.Fleet(hosts, inventory, strategy, request.ssh, transports(transport_factory)),
        jobs.rollback_job(options, request.to, progress),  # a healthy end is recorded
        hooks=jobs.Hooks(progress, confirm),
        retry=None if request.dry_run else jobs.RetryTarget(retry_dir, request.retry_file),
    )


def backups(
    request: BackupsRequest,
    *,
    transport_factory: TransportFactory | None = None,
    progress: ProgressFn | None = None,
) -> list[HostResult]:
    """List each host's backups (newest first, with the flag-level difference to the current unit);
    with ``prune_keep``, delete all but the newest N per file (never the newest, never the current state's).
    ``progress``: each host once read."""

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.rollback.restore import backups_host
        from remediate.host.units import each_unit

        options = unit_options_for(entry, request.unit, lock_timeout=request.lock_timeout, dry_run=request.dry_run)
        return each_unit(
            transport,
            options,
            lambda t, o: backups_host(t, o, label=entry.name, prune_keep=request.prune_keep),
            label=entry.name,
        )

    return for_each_host(
        request.targets,
        request.inventory,
        request.ssh,
        one,
        forks=request.forks,
        transport_factory=transport_factory,
        progress=progress,
    )
