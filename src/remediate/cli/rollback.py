"""`rollback` and `backups`: a unit restored from its backup as a verified transaction; the backups listed or pruned."""

from __future__ import annotations

import click

from remediate.cli.app import cli
from remediate.cli.options import (
    Connection,
    api,
    confirm_prompt,
    connection_options,
    exit_with_rollout,
    exit_with_table,
    fleet_options,
    forks_option,
    handle_errors,
    hosts,
    live_progress,
    render_results,
    resolve_timeout,
    ssh_options,
    strategy,
    timeout_options,
)


@cli.command()
@connection_options
@fleet_options
@click.option("--to", "to", default="latest", show_default=True, metavar="PATH|latest", help="The backup to restore.")
@timeout_options(wait=True, lock=True, alias="--wait-timeout")
@click.option(
    "--retry-file", metavar="PATH", help="Inventory rollouts: write the retry file here (default: state dir)."
)
@click.option("--dry-run", is_flag=True, help="Show what would be restored; change nothing.")
@click.option("--all-instances", is_flag=True, allow_from_autoenv=False,
              help="The backup is of a template shared by its instances: restore it once and restart every "
                   "running instance in turn, this one first.")  # fmt: skip
@handle_errors
def rollback(
    targets: tuple[str, ...],
    inventory: str | None,
    identity: str | None,
    known_hosts: str | None,
    accept_new_host_key: bool,
    connect_timeout: float | None,
    ssh_config: str | None,
    sudo: bool,
    local: bool,
    unit: str | None,
    as_json: bool,
    canary: int | None,
    batch: str | None,
    forks: int | None,
    max_failures: str | None,
    pause_after_canary: bool,
    yes: bool,
    to: str,
    wait_timeout: float | None,
    lock_timeout: int | None,
    timeout: float | None,
    retry_file: str | None,
    dry_run: bool,
    all_instances: bool,
) -> None:
    """Restore a unit from its backup as a verified transaction (backup, atomic write, restart, wait).

    The current unit is first saved as <file>.bak.rollback.<epoch>, so a rollback can be rolled back.

    \b
    Examples:
      remediate rollback gpu-01 --dry-run
      remediate rollback gpu-01 --to /etc/systemd/system/sglang.service.bak.oom.1795939200
      remediate rollback rack-a -i inventory.yaml --canary 1
    """
    given = Connection(targets, inventory, identity, known_hosts, accept_new_host_key, connect_timeout, ssh_config,
                       sudo, local)  # fmt: skip
    with live_progress(as_json) as progress:
        confirm = confirm_prompt(pause_after_canary, yes, progress)
        where = hosts(given)
        request = api.RollbackRequest(
            targets=where.targets,
            inventory=where.inventory,
            ssh=ssh_options(given),
            unit=unit,
            to=to,
            timeout=resolve_timeout(timeout, wait_timeout, "wait_timeout", 900.0),
            retry_file=retry_file,
            lock_timeout=lock_timeout,
            dry_run=dry_run,
            all_instances=all_instances,
            strategy=strategy(canary, batch, forks, max_failures, pause_after_canary),
        )
        rollout = api.rollback(request, transport_factory=where.transport_factory, progress=progress, confirm=confirm)
    exit_with_rollout(rollout, as_json=as_json, dry_run=dry_run)


@cli.command()
@connection_options
@click.option(
    "--prune", is_flag=True, help="Delete old backups beyond --keep (never the newest, never the current state's)."
)
@click.option(
    "--keep", type=click.IntRange(min=1), default=10, show_default=True, help="Backups to keep per file with --prune."
)
@click.option("--dry-run", is_flag=True, help="With --prune: list what would be deleted.")
@timeout_options(wait=False, lock=True, alias="--connect-timeout")
@forks_option
@handle_errors
def backups(
    targets: tuple[str, ...],
    inventory: str | None,
    identity: str | None,
    known_hosts: str | None,
    accept_new_host_key: bool,
    connect_timeout: float | None,
    ssh_config: str | None,
    sudo: bool,
    local: bool,
    unit: str | None,
    as_json: bool,
    prune: bool,
    keep: int,
    dry_run: bool,
    lock_timeout: int | None,
    timeout: float | None,
    forks: int | None,
) -> None:
    """List the backups next to each host's unit files, newest first, with what a restore would change.

    \b
    Examples:
      remediate backups gpu-01
      remediate backups all -i inventory.yaml --prune --keep 5 --dry-run
    """
    given = Connection(targets, inventory, identity, known_hosts, accept_new_host_key, connect_timeout, ssh_config,
                       sudo, local)  # fmt: skip
    where = hosts(given)
    request = api.BackupsRequest(
        targets=where.targets,
        inventory=where.inventory,
        ssh=ssh_options(given, resolve_timeout(timeout, connect_timeout, "connect_timeout", 10.0)),
        unit=unit,
        prune_keep=keep if prune else None,
        dry_run=dry_run,
        lock_timeout=lock_timeout,
        forks=forks,
    )
    results = api.backups(request, transport_factory=where.transport_factory)
    exit_with_table(results, as_json=as_json, table=render_results.backups_table)
