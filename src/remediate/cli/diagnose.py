"""`diagnose` (read-only): why each host's server died, from the host or a saved journal."""

from __future__ import annotations

import click

from remediate.cli.app import cli
from remediate.cli.options import (
    Connection,
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
    resolve_timeout,
    smi_timeout_option,
    ssh_options,
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
def diagnose(
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
    since: str | None,
    lines: int,
    timeout: float | None,
    smi_timeout: int | None,
    forks: int | None,
    unit_file: str | None,
    journal: str | None,
) -> None:
    """Read-only: why each host's server died (evidence, arithmetic) and the `remediate oom` to run.

    \b
    Examples:
      remediate diagnose gpu-01 --since 1
      remediate diagnose all -i inventory.yaml --since '2 hours ago' --json
      remediate diagnose --journal sglang.journal --unit-file sglang.service
    """
    given = Connection(targets, inventory, identity, known_hosts, accept_new_host_key, connect_timeout, ssh_config,
                       sudo, local)  # fmt: skip
    if from_journal(journal, unit_file, given):
        saved = api.DiagnoseRequest(
            targets=given.targets, inventory=given.inventory, unit=unit, lines=lines, since=since, journal=journal,
            unit_file=unit_file,
        )  # fmt: skip
        results = api.diagnose_journal(saved)
        return exit_with_table(results, as_json=as_json, table=render_diagnose.diagnose_report)
    ssh = ssh_options(given, resolve_timeout(timeout, connect_timeout, "connect_timeout", 10.0))
    where = hosts(given)
    request = api.DiagnoseRequest(
        targets=where.targets,
        inventory=where.inventory,
        ssh=ssh,
        unit=unit,
        lines=lines,
        since=since,
        smi_timeout=smi_timeout,
        forks=forks,
    )
    results = api.diagnose(request, transport_factory=where.transport_factory)
    exit_with_table(results, as_json=as_json, table=render_diagnose.diagnose_report)
