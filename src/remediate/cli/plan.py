"""`plan` (read-only): KV pool and headroom per fraction, from the host, a saved journal or offline numbers."""

from __future__ import annotations

from typing import Any

import click

from remediate.cli.app import cli
from remediate.cli.options import (
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
def plan(**kw: Any) -> None:
    """Read-only: KV pool and headroom per fraction, the largest that fits. Example: remediate plan gpu-01"""
    if from_journal(kw):
        saved = ("unit_file", "target_tokens", "chunked_prefill_size", "margin", "targets", "inventory", "unit")
        results = api.plan_journal(kw["journal"], **{k: kw[k] for k in saved})
        return exit_with_table(results, as_json=kw["as_json"], table=render_plan.plan_report)
    if kw["offline"] and kw["local"]:
        fail("--offline plans without a host: --local has no meaning with it")
    if kw["offline"]:
        offline = ("targets", "gpu_mem_gib", "free_after_weights_gib", "cell_bytes", "page_size", "target_tokens")
        doc = api.offline_plan(**{k: kw[k] for k in offline})
        if kw["as_json"]:
            return click.echo(render_console.dumps({"offline": True, "plan": doc}))
        return render_plan.plan_table(stdout(), doc, title="offline plan")
    keys = ("unit", "target_tokens", "chunked_prefill_size", "margin", "forks")
    results = api.plan(ssh=ssh_options(kw), **hosts(kw), **{k: kw[k] for k in keys})
    exit_with_table(results, as_json=kw["as_json"], table=render_plan.plan_report)
# fmt: on
