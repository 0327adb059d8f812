"""`bench` (read-only): the long-context sweep over hosts, one after another."""

from __future__ import annotations

import sys
from typing import Any

import click

from remediate import __version__
from remediate.cli.app import cli
from remediate.cli.options import (
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
def bench(**kw: Any) -> None:
    """Prove the fix: the incident's long-context sweep at exact token counts (read-only, host after host)."""
    keys = ("unit", "contexts", "gen", "runs", "warmup", "output", "csv_path", "plot")
    where = hosts(kw)
    factory = where.pop("transport_factory", None)
    request = api.bench_request(ssh=ssh_options(kw), **where, **{k: kw[k] for k in keys})
    with render_bench.BenchProgress(stderr(), points_per_host=len(request.args.contexts), quiet=kw["as_json"]) as bar:
        results = api.bench(request=request, progress=bar, transport_factory=factory)
    render_bench.bench_report(stdout(), results, request.args, as_json=kw["as_json"])
    sys.exit(api.finish_bench(results, request, version=__version__))
