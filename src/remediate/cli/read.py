"""The read-only commands: `status`, `diagnose`, `backups` (its --prune changes backups only), `plan`, `bench`."""

from __future__ import annotations

import sys
from typing import Any

import click

from remediate import __version__
from remediate.cli.app import cli
from remediate.cli.options import (
    api,
    checked,
    connection_options,
    exit_with_table,
    fail,
    forks_option,
    handle_errors,
    hosts,
    render_bench,
    render_console,
    render_diagnose,
    render_plan,
    render_results,
    smi_timeout_option,
    ssh_options,
    stderr,
    stdout,
    timeout,
    timeout_options,
)


def journal_options(fn: Any) -> Any:
    """``--journal FILE`` and ``--unit-file UNIT`` of `diagnose` and `plan`: a saved journal, no host."""
    fn = click.option("--unit-file", metavar="UNIT", help="With --journal: the local unit file whose settings to use.")(
        fn
    )
    return click.option(
        "--journal",
        metavar="FILE",
        help="A saved `journalctl -u UNIT` (short, short-iso, json, cat; - for stdin) instead of a host.",
    )(fn)


def _from_journal(kw: dict[str, Any]) -> bool:
    """--journal given (then no TARGET, no --inventory, no --local); --unit-file without it is bad input."""
    if kw["journal"] is not None and kw.get("local"):
        fail("--journal reads a saved journal: --local has no meaning with it")
    api.check_journal_flags(
        kw["journal"], kw["unit_file"], kw["targets"], kw["inventory"], offline=kw.get("offline", False)
    )
    return kw["journal"] is not None


@cli.command()
@connection_options
@timeout_options(wait=False, lock=False, alias="--connect-timeout")
@forks_option
@handle_errors
def status(**kw: Any) -> None:
    """Read-only: each host's sglang unit, state, memory settings, tokens, and whether it is remediated.

    \b
    Examples:
      remediate status gpu-01 gpu-02
      remediate status all -i inventory.yaml --json
      sudo remediate status --local
    """
    results = api.status(
        **hosts(kw),
        ssh=ssh_options(kw, timeout(kw, "connect_timeout", 10.0)),
        unit=kw["unit"],
        forks=kw["forks"],
    )
    exit_with_table(results, as_json=kw["as_json"], table=render_results.status_table)


@cli.command()
@connection_options
@click.option("--since", metavar="RESTARTS|TIME", help="Restarts to look back over (0: this run) or a journalctl time.")
@click.option("--lines", callback=checked("lines"), metavar="N", default=2000, show_default=True,
              help="Journal lines to read.")  # fmt: skip
@timeout_options(wait=False, lock=False, alias="--connect-timeout")
@smi_timeout_option
@forks_option
@journal_options
@handle_errors
def diagnose(**kw: Any) -> None:
    """Read-only: why each host's server died (evidence, arithmetic) and the `remediate oom` to run.

    \b
    Examples:
      remediate diagnose gpu-01 --since 1
      remediate diagnose all -i inventory.yaml --since '2 hours ago' --json
      remediate diagnose --journal sglang.journal --unit-file sglang.service
    """
    if _from_journal(kw):
        journal = {k: kw[k] for k in ("unit_file", "lines", "since", "targets", "inventory", "unit")}
        results = api.diagnose_journal(kw["journal"], **journal)
        return exit_with_table(results, as_json=kw["as_json"], table=render_diagnose.diagnose_report)
    named = {k: kw[k] for k in ("unit", "lines", "since", "smi_timeout", "forks")}
    exit_with_table(api.diagnose(ssh=ssh_options(kw, timeout(kw, "connect_timeout", 10.0)), **hosts(kw), **named),
                     as_json=kw["as_json"], table=render_diagnose.diagnose_report)  # fmt: skip


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
    if _from_journal(kw):
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
