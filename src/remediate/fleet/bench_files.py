"""The files ``remediate bench`` writes: ``--output`` JSON lines (appended), ``--csv``, ``--plot`` PNG.

matplotlib is an optional extra (``pip install 'remediate[plot]'``); :func:`require_plot` says so
before any host is contacted.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from remediate.core.bench.record import CSV_COLUMNS, RunArgs, csv_rows, point_record
from remediate.core.bench.sweep import HostBench
from remediate.errors import ConfigError

if TYPE_CHECKING:
    from remediate.fleet.bench import BenchRequest

PLOT_EXTRA = "pip install 'remediate[plot]'"


def require_plot() -> None:
    """``--plot`` needs matplotlib: exit 2 naming the extra when it is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(f"matplotlib is not installed; {PLOT_EXTRA}", source="--plot")


def check_writable(path: str, flag: str) -> None:
    """Fail before the sweep, not after it, when an output file cannot be written."""
    parent = Path(path).expanduser().resolve().parent
    if not parent.is_dir():
        raise ConfigError(f"{path}: directory {parent} does not exist", source=flag)
    if not os.access(parent, os.W_OK) or (Path(path).exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"{path}: not writable", source=flag)


def check_outputs(output: str | None, csv_path: str | None, plot: str | None) -> None:
    """Every output named can be written (and --plot has matplotlib) — checked before any host is contacted."""
    if plot:
        require_plot()
    for flag, path in (("--output", output), ("--csv", csv_path), ("--plot", plot)):
        if path:
            check_writable(path, flag)


def write_outputs(benches: Sequence[HostBench], request: BenchRequest, *, version: str) -> None:
    """Every file the request names: ``--output`` (appended), ``--csv``, ``--plot``."""
    if request.output:
        append_jsonl(request.output, benches, request.args, version=version)
    if request.csv_path:
        write_csv(request.csv_path, benches)
    if request.plot:
        write_plot(request.plot, benches, request.args)


def append_jsonl(path: str, benches: Sequence[HostBench], args: RunArgs, *, version: str) -> int:
    """Append one JSON line per point of every host; returns the number of lines written."""
    date = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        json.dumps(point_record(b, p, args, date=date, version=version), ensure_ascii=False)
        for b in benches
        for p in b.points
    ]
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))
    return len(lines)


def write_csv(path: str, benches: Sequence[HostBench]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS))
        writer.writeheader()
        writer.writerows(csv_rows(list(benches)))


def write_plot(path: str, benches: Sequence[HostBench], args: RunArgs) -> None:
    """TTFT and decode tok/s against context length (log x), one line per host."""
    require_plot()
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, (ttft_ax, decode_ax) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for bench in benches:
        ok = [p for p in bench.points if p.status == "ok"]
        xs = [p.prompt_tokens or p.requested for p in ok]
        ttft_ax.plot(xs, [p.summary("ttft").median for p in ok], marker="o", label=bench.host)
        decode_ax.plot(xs, [p.summary("decode").median for p in ok], marker="o", label=bench.host)
    for ax, label, title in (
        (ttft_ax, "TTFT (s, log)", "Time to first token"),
        (decode_ax, "decode (tokens/s, log)", "Decode throughput"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")  # both span decades from 1k to 185k tokens
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1024:g}k" if v >= 1024 else f"{v:g}"))
        ax.set_xlabel("context length (prompt tokens, log)")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    runs = "one request" if args.runs == 1 else f"median of {args.runs} requests"
    fig.suptitle(f"remediate bench: exact input_ids, {args.gen} generated tokens, {runs} per point")
    fig.savefig(path, dpi=110)
    plt.close(fig)
