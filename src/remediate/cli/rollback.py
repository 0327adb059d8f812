"""`rollback` and `backups`: a unit restored from its backup as a verified transaction; the backups listed or pruned."""

from __future__ import annotations

from typing import Any

import click

from remediate.cli import flags
from remediate.cli.app import cli
from remediate.cli.options import (
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
    ssh_options,
    timeout,
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
def rollback(**kw: Any) -> None:
    """Restore a unit from its backup as a verified transaction (backup, atomic write, restart, wait).

    The current unit is first saved as <file>.bak.rollback.<epoch>, so a rollback can be rolled back.

    \b
    Examples:
      remediate rollback gpu-01 --dry-run
      remediate rollback gpu-01 --to /etc/systemd/system/sglang.service.bak.oom.1795939200
      remediate rollback rack-a -i inventory.yaml --canary 1
    """
    with live_progress(kw["as_json"]) as progress:
        confirm = confirm_prompt(kw, progress)
        rollout = api.rollback(
            **hosts(kw),
            ssh=ssh_options(kw),
            unit=kw["unit"],
            to=kw["to"],
            timeout=timeout(kw, "wait_timeout", 900.0),
            retry_file=kw["retry_file"],
            lock_timeout=kw["lock_timeout"],
            dry_run=kw["dry_run"],
            all_instances=kw["all_instances"],
            strategy=flags.strategy_from_cli(kw),
            progress=progress,
            confirm=confirm,
        )
    exit_with_rollout(rollout, as_json=kw["as_json"], dry_run=kw["dry_run"])


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
def backups(**kw: Any) -> None:
    """List the backups next to each host's unit files, newest first, with what a restore would change.

    \b
    Examples:
      remediate backups gpu-01
      remediate backups all -i inventory.yaml --prune --keep 5 --dry-run
    """
    results = api.backups(
        **hosts(kw),
        ssh=ssh_options(kw, timeout(kw, "connect_timeout", 10.0)),
        unit=kw["unit"],
        prune_keep=kw["keep"] if kw["prune"] else None,
        dry_run=kw["dry_run"],
        lock_timeout=kw["lock_timeout"],
        forks=kw["forks"],
    )
    exit_with_table(results, as_json=kw["as_json"], table=render_results.backups_table)
