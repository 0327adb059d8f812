"""The API of `rollback` (a rollout) and `backups` (list, prune)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from remediate.api.hosts import (
    RolloutResult,
    TransportFactory,
    check_results_kept,
    for_each_host,
    given_hosts,
    transports,
)
from remediate.core.bounds import check_options
from remediate.errors import ConfigError
from remediate.fleet import jobs
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest
from remediate.fleet.settings import (
    build_strategy,
    resolve_hosts,
    run_options_for,
)
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import SSHOptions, Transport

__all__ = ["backups", "rollback"]


def rollback(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    to: str = "latest",
    timeout: float = 900.0,
    dry_run: bool = False,
    strategy: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    confirm: Callable[[str], bool] | None = None,
    transport_factory: TransportFactory | None = None,
    retry_dir: str | None = None,
    retry_file: str | None = None,
    lock_timeout: int | None = None,
    all_instances: bool = False,
    hosts: Sequence[HostEntry] = (),
) -> RolloutResult:
    """Restore each host's latest backup (or ``to``); a rollback over a group is a rollout too. ``hosts``: the
    hosts themselves, already resolved (the watcher's, as polled): ``targets`` are not resolved again."""
    check_options(wait_timeout=timeout, lock_timeout=lock_timeout)  # before anything is read, as the CLI does
    inventory_obj, hosts = given_hosts(hosts, inventory) or resolve_hosts(targets, inventory)
    if to != "latest" and len(hosts) > 1:
        raise ConfigError("--to PATH names one file: use it with one host")
    plan = build_strategy(strategy or {}, inventory_obj)
    options = {
        h.name: replace(
            run_options_for(
                h, OomRequest(unit=unit, timeout=timeout, lock_timeout=lock_timeout, all_instances=all_instances)
            ),
            dry_run=dry_run,
        )
        for h in hosts
    }
    if not dry_run:
        check_results_kept(inventory_obj, retry_dir, retry_file)
    return jobs.roll_out(
        jobs.Fleet(hosts, inventory_obj, plan, ssh or SSHOptions(), transports(transport_factory)),
        jobs.rollback_job(options, to, progress),  # a healthy end is recorded
        hooks=jobs.Hooks(progress, confirm),
        retry=None if dry_run else jobs.RetryTarget(retry_dir, retry_file),
    )


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
        from remediate.host.rollback.restore import backups_host
        from remediate.host.units import each_unit

        options = replace(run_options_for(entry, OomRequest(unit=unit, lock_timeout=lock_timeout)), dry_run=dry_run)
        return each_unit(
            transport,
            options,
            lambda t, o: backups_host(t, o, label=entry.name, prune_keep=prune_keep),
            label=entry.name,
        )

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, forks=forks, transport_factory=transport_factory)
