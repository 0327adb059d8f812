"""`status` (read-only): each host's unit, state and memory settings."""

from __future__ import annotations

from remediate.cli.app import cli
from remediate.cli.options import (
    Connection,
    api,
    connection_options,
    exit_with_table,
    forks_option,
    handle_errors,
    hosts,
    render_results,
    resolve_timeout,
    ssh_options,
    timeout_options,
)


@cli.command()
@connection_options
@timeout_options(wait=False, lock=False, alias="--connect-timeout")
@forks_option
@handle_errors
def status(
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
    timeout: float | None,
    forks: int | None,
) -> None:
    """Read-only: each host's sglang unit, state, memory settings, tokens, and whether it is remediated.

    \b
    Examples:
      remediate status gpu-01 gpu-02
      remediate status all -i inventory.yaml --json
      sudo remediate status --local
    """
    given = Connection(targets, inventory, identity, known_hosts, accept_new_host_key, connect_timeout, ssh_config,
                       sudo, local)  # fmt: skip
    where = hosts(given)
    ssh = ssh_options(given, resolve_timeout(timeout, connect_timeout, "connect_timeout", 10.0))
    request = api.StatusRequest(targets=where.targets, inventory=where.inventory, ssh=ssh, unit=unit, forks=forks)
    results = api.status(request, transport_factory=where.transport_factory)
    exit_with_table(results, as_json=as_json, table=render_results.status_table)
