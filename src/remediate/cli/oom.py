"""`oom`: the OOM fix on hosts, as one verified transaction each (with --dry-run)."""

from __future__ import annotations

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
    smi_timeout_option,
    ssh_options,
    timeout,
    timeout_options,
)


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
