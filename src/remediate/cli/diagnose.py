"""`diagnose` (read-only): why each host's server died, from the host or a saved journal."""

from __future__ import annotations

from typing import Any

import click

from remediate.cli.app import cli
from remediate.cli.options import (
    api,
    checked,
    connection_options,
    exit_with_table,
    forks_option,
    from_journal,
    handle_errors,
    hosts,
    journal_options,
    render_diagnose,
    smi_timeout_option,
    ssh_options,
    timeout,
    timeout_options,
)


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
    if from_journal(kw):
        journal = {k: kw[k] for k in ("unit_file", "lines", "since", "targets", "inventory", "unit")}
        results = api.diagnose_journal(kw["journal"], **journal)
        return exit_with_table(results, as_json=kw["as_json"], table=render_diagnose.diagnose_report)
    named = {k: kw[k] for k in ("unit", "lines", "since", "smi_timeout", "forks")}
    exit_with_table(api.diagnose(ssh=ssh_options(kw, timeout(kw, "connect_timeout", 10.0)), **hosts(kw), **named),
                     as_json=kw["as_json"], table=render_diagnose.diagnose_report)  # fmt: skip
