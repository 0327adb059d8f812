"""The reports of the commands that work on units: `edit`, `oom`, `rollback`, `status`, `backups`; the recap and the
live progress. Takes a rich Console; never decides exit codes."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from remediate.cli.render.console import format_tokens, safe
from remediate.cli.render.plan import plan_table
from remediate.core.engines import DEFAULT, engine_named
from remediate.core.unitfile.edit import UnitEdit
from remediate.core.unitfile.report import display_text, plan_to_dict, summary_lines, unified_diff
from remediate.models import BackupListing, HostResult, UnitState

_OUTCOME_STYLE = {
    "remediated": "green",
    "restored": "green",
    "unchanged": "cyan",
    "drift": "yellow",
    "rolled_back": "yellow",
    "failed": "red",
    "unreachable": "red",
    "not_attempted": "dim",
}


def diff_lines(console: Console, diff: str) -> None:
    for line in diff.splitlines():
        style = None
        if line.startswith("+") and not line.startswith("+++"):
            style = "green"
        elif line.startswith("-") and not line.startswith("---"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        console.print(display_text(line), style=style, highlight=False, markup=False)


def edit_report(console: Console, path: str, plan: UnitEdit, backup: str | None) -> None:
    """`remediate edit`: the masked diff, the flag summary, notes, and what was written."""
    diff_lines(console, "".join(unified_diff(f.path, f.old_text, f.new_text) for f in plan.files))
    for line in summary_lines(plan):
        console.print(line, highlight=False, markup=False)
    for note in plan.notes:
        console.print(f"note: {display_text(note)}", highlight=False, markup=False)
    if not plan.is_changed:
        console.print(f"{display_text(path)}: already remediated, nothing to change", highlight=False, markup=False)
    elif backup:
        console.print(f"wrote {display_text(path)} (backup {display_text(backup)})", highlight=False, markup=False)


def edit_document(plan: UnitEdit, backup: str | None) -> dict[str, Any]:
    """`remediate edit --json`: the plan, and whether (and where to) it was backed up and written."""
    return {**plan_to_dict(plan), "written": bool(backup), "backup": backup}


def host_report(console: Console, result: HostResult, *, dry_run: bool = False) -> None:
    style = _OUTCOME_STYLE.get(result.outcome, "")
    where = f" {result.unit} ({result.unit_path})" if result.unit else ""
    console.print(f"[bold]{escape(result.host)}[/bold]{escape(where)}", highlight=False)
    for phase in result.phases:
        console.print(f"  {phase.name:<9} {phase.seconds:7.2f}s", highlight=False)
    for line in result.summary:
        console.print(f"  {safe(line)}", highlight=False)
    for note in result.notes:
        console.print(f"  note: {safe(note)}", highlight=False)
    if result.diff and (dry_run or result.changed):
        diff_lines(console, result.diff)
    if dry_run and result.steps:
        console.print("  would run on the host:", highlight=False)
        for step in result.steps:
            console.print(f"    {safe(step)}", highlight=False)
    if result.backup:
        console.print(f"  backup    {escape(result.backup)}", highlight=False)
    if result.plan:
        plan_table(console, result.plan, title=f"{result.host}: --auto plan")
    if result.max_total_num_tokens is not None:
        name = engine_named(result.engine).capacity_name  # vLLM: "GPU KV cache size"
        console.print(f"  tokens    {name}={_tokens(result)}", highlight=False)
    for instance in result.instances or ():  # oom --all-instances: each instance's outcome, in turn
        tokens = instance.max_total_num_tokens
        how = instance.outcome + (f", max_total_num_tokens={tokens:,}" if tokens is not None else "")
        console.print(f"  instance  {safe(instance.unit)}: {safe(how)}", highlight=False)
    for warning in result.warnings:
        console.print(f"  [yellow]warning[/yellow] {safe(warning)}", highlight=False)
    if result.error:
        console.print(f"  [red]error[/red]   {safe(result.error)}", highlight=False)
    for line in result.journal:
        console.print(f"  journal │ {display_text(line)}", style="dim", highlight=False, markup=False)
    label = "dry run: " + ("would change" if result.changed else "nothing to change") if dry_run else result.outcome
    if dry_run and result.outcome == "drift":
        label = "dry run: drift (a real run restarts the server)"
    console.print(f"  [{style}]{escape(label)}[/{style}] in {result.seconds:.1f}s", highlight=False)


def _tokens(result: HostResult) -> str:
    tokens = result.max_total_num_tokens
    if tokens is None:
        return "-"
    return format_tokens(tokens, result.target_tokens)


def several_units(results: Sequence[HostResult]) -> bool:
    """A host listed more than once ran several units: the tables then name each row's unit too."""
    hosts = [r.host for r in results]
    return len(set(hosts)) < len(hosts)


def recap(console: Console, results: Sequence[HostResult]) -> None:
    table = Table(title="recap", show_lines=False)
    with_unit = several_units(results)  # one unit per host: the recap as it always was
    for column in ("host", *(("unit",) if with_unit else ()), "outcome", "tokens", "backup", "seconds", "error"):
        table.add_column(column)
    for r in results:
        style = _OUTCOME_STYLE.get(r.outcome, "")
        table.add_row(
            escape(r.host),
            *((escape(r.unit or ""),) if with_unit else ()),
            f"[{style}]{r.outcome}[/{style}]",
            _tokens(r),
            escape(r.backup or ""),
            f"{r.seconds:.1f}",
            safe(r.error or ""),
        )
    console.print(table)
    counts = Counter(r.outcome for r in results)
    console.print(", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())), highlight=False)


def status_table(console: Console, results: Sequence[HostResult]) -> None:
    # the default engine (sglang) alone: its own words; any other engine: an engine column, the fraction and the
    # prefill bound
    mixed = any((r.engine or DEFAULT.name) != DEFAULT.name for r in results)
    table = Table(title="server units" if mixed else f"{DEFAULT.label} units")
    knobs = ("engine", "fraction", "prefill") if mixed else ("mem-fraction", "chunk")
    for column in ("host", "unit", "state", *knobs, "PYTORCH_CUDA_ALLOC_CONF", "tokens", "remediated"):
        table.add_column(column)
    for r in results:
        if r.error:
            table.add_row(escape(r.host), "", "[red]error[/red]", *[""] * (len(knobs) + 2), safe(r.error))
            continue
        values = [*r.flags_before.values(), None, None][:2]  # the fraction, then the prefill bound
        engine = [escape(r.engine or "-")] if mixed else []
        state = r.status.state if r.status is not None else UnitState()
        table.add_row(
            escape(r.host),
            escape(r.unit or ""),
            escape(f"{state.active_state or ''} ({state.sub_state or ''})"),
            *engine,
            escape(str(values[0] or "-")),
            escape(str(values[1] or "-")),
            escape(str(r.env_before.get("PYTORCH_CUDA_ALLOC_CONF") or "-")),
            _tokens(r),
            _remediated_cell(r),
        )
    console.print(table)
    for r in results:
        if r.engine_version is not None:
            console.print(f"{escape(r.host)}: {escape(r.engine_version.describe())}", highlight=False)
        for warning in r.warnings:
            console.print(f"[yellow]warning[/yellow] {escape(r.host)}: {safe(warning)}", highlight=False)


def _remediated_cell(result: HostResult) -> str:
    """``yes``/``no`` for the unit on disk; ``drift`` when it is remediated but the running server is not (its
    flags or its environment differ from the unit's: a restart, `remediate oom`, brings them in line)."""
    if result.status is None or not result.status.remediated:
        return "[yellow]no[/yellow]"
    return "[yellow]unit only (drift)[/yellow]" if result.outcome == "drift" else "[green]yes[/green]"


def backups_table(console: Console, results: Sequence[HostResult]) -> None:
    """Per host, its backups newest first and what restoring each would change."""
    for r in results:
        if r.error:
            console.print(f"[bold]{escape(r.host)}[/bold] [red]error[/red] {safe(r.error)}", highlight=False)
            continue
        listing = r.backup_listing or BackupListing(())
        rows = listing.rows
        console.print(f"[bold]{escape(r.host)}[/bold] {escape(r.unit or '')} ({escape(r.unit_path or '')})")
        if not rows:
            console.print("  no backups", highlight=False)
        for row in rows:
            when = datetime.fromtimestamp(row.time, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            source = " (mtime)" if row.time_source == "mtime" else ""
            mark = "  [red]prune[/red]" if row.prune else ""
            mark += "  [red]TRUNCATED: not a complete copy, never restored[/red]" if row.truncated else ""
            mark += f"  [red]NOT RESTORABLE: {escape(row.unsafe)}, never read[/red]" if row.unsafe else ""
            console.print(
                f"  {when}{source}  {escape(row.path)}  {row.size} B  {row.sha256[:12]}{mark}", highlight=False
            )
            change = "; ".join(row.changes) or ("identical to the current unit" if row.identical_to_current else "")
            if change:
                console.print(f"      restoring: {safe(change)}", highlight=False)
        for path in listing.deleted or ():
            console.print(f"  deleted {escape(path)}", highlight=False)
        for path in listing.would_delete or ():
            console.print(f"  would delete {escape(path)}", highlight=False)


class LiveProgress:
    """Progress on stderr while hosts are worked on.

    On a terminal: one transient line per host (its latest phase; while waiting, the load phase,
    elapsed time and newest journal line), rollout events scrolling above. In a log: only rollout
    events and one line per 15 s of a long model load, since the final report repeats the phases.
    Quiet for ``--json`` unless on a terminal.
    """

    def __init__(self, console: Console, *, quiet: bool = False, log_every: float = 15.0) -> None:
        self.console = console
        self.interactive = console.is_terminal
        self.quiet = quiet and not self.interactive
        self.log_every = log_every
        self._lines: dict[str, str] = {}
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> LiveProgress:
        if self.interactive:
            self._live = Live(self._render(), console=self.console, transient=True, refresh_per_second=8)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """Stop the live display (e.g. for a prompt), then resume it."""
        if self._live is None:
            yield
            return
        self._live.stop()
        try:
            yield
        finally:
            self._live.start()

    def _render(self) -> Group:
        return Group(*(Text.assemble((host, "dim"), " ", line) for host, line in self._lines.items()))

    def __call__(self, host: str, phase: str, detail: str) -> None:
        if self.quiet:
            return
        with self._lock:
            if self._live is not None:
                if phase:
                    # the host's one live line: its latest phase (the final report lists them all)
                    self._lines[host] = f"{phase:<9} {display_text(detail)}"[:240]
                else:
                    self._live.console.print(Text.assemble((host, "dim"), f" {display_text(detail)}"))
                self._live.update(self._render())
                return
            if phase == "waiting":
                now = time.monotonic()
                if now - self._last.get(host, float("-inf")) < self.log_every:
                    return
                self._last[host] = now
            elif phase:
                return  # the final report lists every phase with its time
            self.console.print(Text.assemble((host, "dim"), f" {phase or '':<9} {display_text(detail)}"))
