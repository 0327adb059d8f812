"""Human output of `remediate bench`: the incident's sweep table per host, the progress bar, the JSON."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from remediate.cli.render.console import dumps, safe
from remediate.core.bench.record import RunArgs
from remediate.core.bench.sweep import BenchPoint, HostBench
from remediate.core.unitfile.report import display_text, mask_data
from remediate.fleet.inventory import HostEntry

_STATUS_STYLE = {"ok": "green", "skipped": "yellow", "failed": "red"}


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def bench_table(console: Console, bench: HostBench, *, runs: int = 1) -> None:
    """requested, actual, TTFT s, prefill tok/s, decode tok/s, decode wall s, status — one row per length."""
    limits = bench.limits
    title = f"[bold]{escape(bench.host)}[/bold] {safe(bench.unit or '')}"
    if limits.max_total_num_tokens is not None:
        title += f" · max_total_num_tokens {limits.max_total_num_tokens:,}"
    if limits.max_req_input_len is not None:
        title += f" · max_req_input_len {limits.max_req_input_len:,}"
    if bench.points:
        table = Table(title=title, title_justify="left")
        columns = ["requested", "actual", "TTFT s", "prefill tok/s", "decode tok/s", "decode wall s"]
        if runs > 1:
            columns += ["TTFT p90 s", "TTFT p99 s"]
        for column in columns:
            table.add_column(column, justify="right")
        table.add_column("status")
        for point in bench.points:
            table.add_row(*_row(point, runs))
        console.print(table)
    else:
        console.print(title, highlight=False)
    for point in bench.points:
        if point.note:
            console.print(f"  {point.requested:,}: {safe(point.note)}", highlight=False)
    if bench.error:
        console.print(f"  [red]error[/red] {safe(bench.error)}", highlight=False)
    for line in bench.journal:
        console.print(f"    {safe(line)}", highlight=False)


def _row(point: BenchPoint, runs: int) -> list[str]:
    ttft = point.summary("ttft")
    row = [
        f"{point.requested:,}",
        "-" if point.prompt_tokens is None else f"{point.prompt_tokens:,}",
        _num(ttft.median, ".3f"),
        _num(point.summary("prefill").median, ",.0f"),
        _num(point.summary("decode").median, ".1f"),
        _num(point.summary("decode_wall").median, ".3f"),
    ]
    if runs > 1:
        row += [_num(ttft.p90, ".3f"), _num(ttft.p99, ".3f")]
    style = _STATUS_STYLE.get(point.status, "")
    return [*row, f"[{style}]{point.status}[/{style}]"]


class BenchProgress:
    """On a terminal: one bar over every (host, length) point, with elapsed time and an ETA from the
    points so far. In a log: one line per finished point. Quiet for ``--json`` unless on a terminal."""

    def __init__(self, console: Console, *, points_per_host: int, quiet: bool = False) -> None:
        self.console = console
        self.interactive = console.is_terminal
        self.quiet = quiet and not self.interactive
        self.per_host = points_per_host
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> BenchProgress:
        if self.interactive:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("elapsed"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
                speed_estimate_period=86400,  # the ETA comes from every point so far, not the last 30 s
            )
            self._progress.start()
            self._task = self._progress.add_task("connecting", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def host(self, entry: HostEntry, index: int, count: int) -> None:
        """A host starts: points of hosts before it count as done (a host that stopped early skips the rest)."""
        if self._progress is not None and self._task is not None:
            self._progress.update(
                self._task,
                total=count * self.per_host,
                completed=index * self.per_host,
                description=f"{entry.name} connecting",
            )

    def request(self, host: str, requested: int, run: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=f"{host} {requested:,} tokens (request {run})")

    def point(self, bench: HostBench, point: BenchPoint) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)
            return
        if self.quiet:
            return
        ttft = point.summary("ttft").median
        decode = point.summary("decode").median
        detail = "" if ttft is None else f" TTFT {ttft:.3f}s decode {_num(decode, '.1f')} tok/s"
        note = f" ({display_text(point.note)})" if point.note else ""
        line = f"{bench.host} {point.requested:,} tokens {point.status}{detail}{note}"
        self.console.print(line, highlight=False, markup=False)


def bench_report(console: Console, benches: Sequence[HostBench], args: RunArgs, *, as_json: bool) -> None:
    """The `bench` result: one table per host, or the ``--json`` document (with the seed, for a re-run)."""
    if as_json:
        console.out(dumps(mask_data({"results": [b.to_dict() for b in benches], "seed": args.seed})), highlight=False)
        return
    for bench in benches:
        bench_table(console, bench, runs=args.runs)
