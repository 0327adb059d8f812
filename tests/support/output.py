"""What the CLI prints for results, as a test reads it: the human report (or the status table) and ``--json``."""

from __future__ import annotations

import io

from rich.console import Console

from remediate.cli.render import console as render_console
from remediate.cli.render import results as render_results
from remediate.models import HostResult


def printed(results: list[HostResult], *, dry_run: bool, table: bool = False) -> str:
    """What the CLI prints for ``results``: the human report (or table) and the ``--json`` document."""
    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False)
    if table:
        render_results.status_table(console, results)
    else:
        for result in results:
            render_results.host_report(console, result, dry_run=dry_run)
    return out.getvalue() + render_console.dumps(render_console.results_document(results))
