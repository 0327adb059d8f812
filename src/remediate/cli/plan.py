"""`plan` (read-only): KV pool and headroom per fraction, from the host, a saved journal or offline numbers."""

from __future__ import annotations

import click

from remediate.cli.app import cli
from remediate.cli.options import (
    Connection,
    api,
    checked,
    connection_options,
    exit_with_table,
    fail,
    forks_option,
    from_journal,
    handle_errors,
    hosts,
    journal_options,
    render_console,
    render_plan,
    ssh_options,
    stdout,
)


# fmt: off
@cli.command()
@connection_options
@click.option("--target-tokens", callback=checked("target_tokens"), metavar="TOKENS",
              help="The pool size wanted (max_total_num_tokens).")  # fmt: skip
@click.option("--chunked-prefill-size", type=int, metavar="N", help="The chunk to plan with (default 4096).")
@click.option("--margin", type=click.FloatRange(0, 10), default=0.1, show_default=True, help="Spare headroom share.")
@click.option("--offline", is_flag=True, help="What-if without a host: free GiB before/after weights, KV bytes/token.")
@click.option("--gpu-mem-gib", type=float, help="--offline: free GiB before the weights load (sglang's total).")
@click.option("--free-after-weights-gib", type=float, help="--offline: free GiB after the weights load.")
@click.option("--cell-bytes", type=float, help="--offline: KV cache bytes per token per rank.")
@click.option("--page-size", type=click.IntRange(min=1), default=1, help="--offline: the KV page size (default 1).")
@forks_option
@journal_options
@handle_errors
def plan(
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
    target_tokens: int | None,
    chunked_prefill_size: int | None,
    margin: float,
    offline: bool,
    gpu_mem_gib: float | None,
    free_after_weights_gib: float | None,
    cell_bytes: float | None,
    page_size: int,
    forks: int | None,
    unit_file: str | None,
    journal: str | None,
) -> None:
    """Read-only: KV pool and headroom per fraction, the largest that fits. Example: remediate plan gpu-01"""
    given = Connection(targets, inventory, identity, known_hosts, accept_new_host_key, connect_timeout, ssh_config,
                       sudo, local)  # fmt: skip
    if from_journal(journal, unit_file, given, offline=offline):
        saved = api.PlanRequest(
            targets=given.targets, inventory=given.inventory, unit=unit, target_tokens=target_tokens,
            chunked_prefill_size=chunked_prefill_size, margin=margin, journal=journal, unit_file=unit_file,
        )
        results = api.plan_journal(saved)
        return exit_with_table(results, as_json=as_json, table=render_plan.plan_report)
    if offline and local:
        fail("--offline plans without a host: --local has no meaning with it")
    if offline:
        numbers = api.OfflinePlanRequest(
            gpu_mem_gib=gpu_mem_gib, free_after_weights_gib=free_after_weights_gib, cell_bytes=cell_bytes,
            page_size=page_size, target_tokens=target_tokens, targets=given.targets,
        )
        doc = api.offline_plan(numbers)
        if as_json:
            return click.echo(render_console.dumps({"offline": True, "plan": doc}))
        return render_plan.plan_table(stdout(), doc, title="offline plan")
    where = hosts(given)
    request = api.PlanRequest(
        targets=where.targets, inventory=where.inventory, ssh=ssh_options(given), unit=unit,
        target_tokens=target_tokens, chunked_prefill_size=chunked_prefill_size, margin=margin, forks=forks,
    )
    results = api.plan(request, transport_factory=where.transport_factory)
    exit_with_table(results, as_json=as_json, table=render_plan.plan_report)
# fmt: on
