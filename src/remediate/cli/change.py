"""The commands that change hosts or files: `edit`, `oom`, `rollback` (each with --dry-run)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from remediate.cli import flags
from remediate.cli.app import cli
from remediate.cli.options import (
    DESIRED,
    api,
    checked,
    confirm_prompt,
    connection_options,
    desired_options,
    exit_with_rollout,
    fleet_options,
    handle_errors,
    hosts,
    live_progress,
    render_console,
    render_results,
    smi_timeout_option,
    ssh_options,
    stdout,
    timeout,
    timeout_options,
)


@cli.command()
@click.argument("unit_file", type=click.Path(path_type=Path))
@desired_options
@click.option("--write", is_flag=True, help="Write the change in place (after a backup UNIT_FILE.bak.oom.<epoch>).")
@click.option("--check", is_flag=True, help="Exit 1 when changes are needed, 0 when already remediated.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@handle_errors
def edit(unit_file: Path, write: bool, check: bool, as_json: bool, **desired_kw: Any) -> None:
    """Show (and with --write apply) the OOM fix to a local unit file.

    \b
    Example:
      remediate edit examples/incident/sglang.service
      remediate edit sglang.service --mem-fraction-static 0.9 --write
    """
    edited = api.edit_unit_file(unit_file, write=write, **desired_kw)
    backup = str(edited.backup) if edited.backup else None
    if as_json:
        click.echo(render_console.dumps(render_results.edit_document(edited.plan, backup)))
    else:
        render_results.edit_report(stdout(), str(unit_file), edited.plan, backup)
    if check and edited.plan.is_changed and not write:
        sys.exit(1)


@cli.command()
@connection_options
@desired_options
@fleet_options
@click.option("--min-tokens", callback=checked("min_tokens"), metavar="TOKENS",
              help="Fail (and roll back) below this max_total_num_tokens.")  # fmt: skip
@click.option("--target-tokens", callback=checked("target_tokens"), metavar="TOKENS",
              help="Report the gap to this capacity (a warning, not a failure).")  # fmt: skip
@timeout_options(wait=True, lock=True, alias="--wait-timeout")
@smi_timeout_option
@click.option(
    "--retry-file", metavar="PATH", help="Inventory rollouts: write the retry file here (default: state dir)."
)
@click.option("--probe", callback=checked("probe"), metavar="TOKENS",
              help="Prefill TOKENS once healthy; the server crashing on it undoes the change.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Show the diff, the flag summary and the remote steps; change nothing.")
@click.option("--force", is_flag=True, allow_from_autoenv=False,
              help="Apply even when the latest crash contradicts it (see diagnose).")  # fmt: skip
@click.option("--no-rollback", is_flag=True, allow_from_autoenv=False,
              help="Leave the new state in place when the server does not come back.")  # fmt: skip
@click.option("--all-instances", is_flag=True, allow_from_autoenv=False,
              help="A template instance whose flags live in the shared template: change the template once and "
                   "restart every running instance in turn, this one first (rolled back on a failure).")  # fmt: skip
@click.option("--auto", is_flag=True, help="Choose fraction, chunk and alloc conf per host from its evidence (plan).")
@click.option("--allow-raise", is_flag=True, allow_from_autoenv=False,
              help="With --auto: allow a fraction above the one that crashed (default: never raised).")  # fmt: skip
@handle_errors
def oom(**kw: Any) -> None:
    """Apply the OOM fix to sglang hosts as one verified transaction each.

    Backs up the unit, lowers --mem-fraction-static, sets --chunked-prefill-size and
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, daemon-reloads, restarts, waits for
    max_total_num_tokens, and rolls back automatically if the server does not come back.

    \b
    Examples:
      remediate oom root@gpu-01 --dry-run
      remediate oom gpu-01 --target-tokens 200000 --json
      remediate oom gpu-* -i inventory.yaml --canary 1 --batch 25% --forks 4
      sudo remediate oom --local --dry-run
      remediate oom gpu-01 --unit sglang@0-3.service --all-instances
    """
    where = hosts(kw)
    request = api.OomRequest(
        targets=where["targets"],
        inventory=where["inventory"],
        ssh=ssh_options(kw),
        unit=kw["unit"],
        cli_desired=api.desired_args(**{k: kw[k] for k in DESIRED}),
        min_tokens=kw["min_tokens"],
        probe_tokens=kw["probe"],
        target_tokens=kw["target_tokens"],
        timeout=timeout(kw, "wait_timeout", 900.0),
        dry_run=kw["dry_run"],
        rollback=not kw["no_rollback"],
        strategy=flags.strategy_from_cli(kw),
        force=kw["force"],
        retry_file=kw["retry_file"],
        lock_timeout=kw["lock_timeout"],
        smi_timeout=kw["smi_timeout"],
        auto=kw["auto"],
        allow_raise=kw["allow_raise"],
        all_instances=kw["all_instances"],
    )
    with live_progress(kw["as_json"]) as progress:
        confirm = confirm_prompt(kw, progress)
        factory = where.get("transport_factory")
        rollout = api.remediate_oom(request, progress=progress, confirm=confirm, transport_factory=factory)
    exit_with_rollout(rollout, as_json=kw["as_json"], dry_run=kw["dry_run"])


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
