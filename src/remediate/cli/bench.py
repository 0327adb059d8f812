"""`bench` (read-only): the long-context sweep over hosts, one after another."""

from __future__ import annotations

import sys

import click

from remediate import __version__
from remediate.cli.app import cli
from remediate.cli.options import (
    Connection,
    api,
    connection_options,
    handle_errors,
    hosts,
    render_bench,
    ssh_options,
    stderr,
    stdout,
)


@cli.command(epilog="Example: remediate bench gpu-01 --contexts 1k,32k,185k --runs 3 --plot bench.png")
@connection_options
@click.option(
    "--contexts",
    default=lambda: api.DEFAULT_CONTEXTS,
    show_default="1k,8k,32k,46k,92k,185k",
    help="Prompt lengths; 1k = 1024.",
)
@click.option(
    "--gen", type=click.IntRange(min=1), default=lambda: api.DEFAULT_GEN, show_default="24", help="New tokens."
)
@click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True, help="Requests per length.")
@click.option("--warmup", type=click.IntRange(min=0), default=0, show_default=True, help="Unmeasured requests first.")
@click.option("--output", metavar="FILE.jsonl", help="Append one JSON line per point (bench_serving-like schema).")
@click.option("--csv", "csv_path", metavar="FILE", help="Write the points as CSV.")
@click.option("--plot", metavar="FILE.png", help="Plot TTFT and decode tok/s against context (remediate[plot]).")
@handle_errors
def bench(
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
    contexts: str,
    gen: int,
    runs: int,
    warmup: int,
    output: str | None,
    csv_path: str | None,
    plot: str | None,
) -> None:
    """Prove the fix: the incident's long-context sweep at exact token counts (read-only, host after host)."""
    given = Connection(targets, inventory, identity, known_hosts, accept_new_host_key, connect_timeout, ssh_config,
                       sudo, local)  # fmt: skip
    where = hosts(given)
    request = api.bench_request(
        where.targets, inventory=where.inventory, ssh=ssh_options(given), unit=unit, contexts=contexts, gen=gen,
        runs=runs, warmup=warmup, output=output, csv_path=csv_path, plot=plot,
    )  # fmt: skip
    with render_bench.BenchProgress(stderr(), points_per_host=len(request.args.contexts), quiet=as_json) as bar:
        results = api.bench(request, transport_factory=where.transport_factory, progress=bar)
    render_bench.bench_report(stdout(), results, request.args, as_json=as_json)
    sys.exit(api.finish_bench(results, request, version=__version__))
