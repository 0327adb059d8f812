"""`oom`: the OOM fix on hosts, as one verified transaction each (with --dry-run)."""

from __future__ import annotations

import click

from remediate.cli.app import cli
from remediate.cli.options import (
    Connection,
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
    resolve_timeout,
    smi_timeout_option,
    ssh_options,
    strategy,
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
def oom(
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
    mem_fraction_static: str | None,
    mem_fraction_step: str | None,
    chunked_prefill_size: str | None,
    alloc_conf: str | None,
    canary: int | None,
    batch: str | None,
    forks: int | None,
    max_failures: str | None,
    pause_after_canary: bool,
    yes: bool,
    min_tokens: int | None,
    target_tokens: int | None,
    wait_timeout: float | None,
    lock_timeout: int | None,
    timeout: float | None,
    smi_timeout: int | None,
    retry_file: str | None,
    probe: int | None,
    dry_run: bool,
    force: bool,
    no_rollback: bool,
    all_instances: bool,
    auto: bool,
    allow_raise: bool,
) -> None:
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
    given = Connection(targets, inventory, identity, known_hosts, accept_new_host_key, connect_timeout, ssh_config,
                       sudo, local)  # fmt: skip
    where = hosts(given)
    request = api.OomRequest(
        targets=where.targets,
        inventory=where.inventory,
        ssh=ssh_options(given),
        unit=unit,
        desired=api.desired_args(
            mem_fraction_static=mem_fraction_static,
            mem_fraction_step=mem_fraction_step,
            chunked_prefill_size=chunked_prefill_size,
            alloc_conf=alloc_conf,
        ),
        min_tokens=min_tokens,
        probe_tokens=probe,
        target_tokens=target_tokens,
        timeout=resolve_timeout(timeout, wait_timeout, "wait_timeout", 900.0),
        dry_run=dry_run,
        rollback=not no_rollback,
        strategy=strategy(canary, batch, forks, max_failures, pause_after_canary),
        force=force,
        retry_file=retry_file,
        lock_timeout=lock_timeout,
        smi_timeout=smi_timeout,
        auto=auto,
        allow_raise=allow_raise,
        all_instances=all_instances,
    )
    with live_progress(as_json) as progress:
        confirm = confirm_prompt(pause_after_canary, yes, progress)
        rollout = api.remediate_oom(
            request, transport_factory=where.transport_factory, progress=progress, confirm=confirm
        )
    exit_with_rollout(rollout, as_json=as_json, dry_run=dry_run)
