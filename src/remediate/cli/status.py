"""`status` (read-only): each host's unit, state and memory settings."""

from __future__ import annotations

from typing import Any

from remediate.cli.app import cli
from remediate.cli.options import (
    api,
    connection_options,
    exit_with_table,
    forks_option,
    handle_errors,
    hosts,
    render_results,
    ssh_options,
    timeout,
    timeout_options,
)


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
