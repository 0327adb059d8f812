"""`edit`: the OOM fix shown on (and with --write applied to) a local unit file."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from remediate.cli.app import cli
from remediate.cli.options import (
    api,
    desired_options,
    handle_errors,
    render_console,
    render_results,
    stdout,
)


@cli.command()
@click.argument("unit_file", type=click.Path(path_type=Path))
@desired_options
@click.option("--write", is_flag=True, help="Write the change in place (after a backup UNIT_FILE.bak.oom.<epoch>).")
@click.option("--check", is_flag=True, help="Exit 1 when changes are needed, 0 when already remediated.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@handle_errors
def edit(
    unit_file: Path,
    mem_fraction_static: str | None,
    mem_fraction_step: str | None,
    chunked_prefill_size: str | None,
    alloc_conf: str | None,
    write: bool,
    check: bool,
    as_json: bool,
) -> None:
    """Show (and with --write apply) the OOM fix to a local unit file.

    \b
    Example:
      remediate edit examples/incident/sglang.service
      remediate edit sglang.service --mem-fraction-static 0.9 --write
    """
    edited = api.edit_unit_file(
        unit_file,
        mem_fraction_static=mem_fraction_static,
        mem_fraction_step=mem_fraction_step,
        chunked_prefill_size=chunked_prefill_size,
        alloc_conf=alloc_conf,
        write=write,
    )
    backup = str(edited.backup) if edited.backup else None
    if as_json:
        click.echo(render_console.dumps(render_results.edit_document(edited.plan, backup)))
    else:
        render_results.edit_report(stdout(), str(unit_file), edited.plan, backup)
    if check and edited.plan.is_changed and not write:
        sys.exit(1)
