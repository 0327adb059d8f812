"""Human output of `remediate plan` (and of `oom --auto`'s plan): the table of fractions and its explanation.

The explanation is one ``(label, text)`` line each (:func:`plan_lines`), labels ``model``, ``draft``, ``spike``,
``calibration``, ``why``, ``note``, ``choice``, ``warning``, ``or``: :func:`plan_table` styles the labels,
the text carries no markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from remediate.cli.render.console import format_tokens
from remediate.core.engines import engine_named
from remediate.models import HostResult


def _model(model: dict[str, Any]) -> str:
    anchor = model.get("anchor")
    fitted = f" (fitted to {anchor['tokens']:,} at {anchor['fraction']:g})" if anchor else ""
    return (
        f"free {model['free0_gib']:.2f} GiB before weights, {model['free1_gib']:.2f} after{fitted}; "
        f"KV cell {model['cell_bytes']:,.0f} B/token; page {model['page_size']}; "
        f"starts from {model['min_viable_fraction']:.4f}"
    )


def _draft(draft: dict[str, Any]) -> str:
    counted = "counted before the pool is sized" if draft["is_counted"] else "not counted: it takes the headroom"
    return f"{draft['weights_gib']:.2f} GiB of weights and {draft['cell_bytes']:,.0f} B/token of KV per rank, {counted}"


def _spike(spike: dict[str, Any]) -> str:
    per_token = spike["per_token_bytes"]
    per = f" = {per_token / 1024:.1f} KiB/token" if per_token else ""
    at = f" (at {spike['fraction']:g})" if spike.get("fraction") else ""
    tokens = spike["prefill_tokens"]
    prefill = f"for {tokens:,} prefill tokens{per}" if tokens else "(the prefill's size not logged)"
    return (
        f"{spike['tried_bytes'] / 2**20:.0f} MiB {prefill}; "
        f"{spike['reserved_unallocated_bytes'] / 2**20:.0f} MiB reserved but unallocated{at}"
    )


def _vllm(vllm: dict[str, Any]) -> str:
    total = "unknown" if vllm["total_gib"] is None else f"{vllm['total_gib']:.2f} GiB ({vllm['total_source']})"
    floor = vllm.get("floor_utilization")
    fits = f"fits from {floor:g} up" if floor is not None else "fits at no utilization"
    mml = vllm.get("max_model_len")
    return f"GPU total {total}; one request of max_model_len {mml:,} {fits}" if mml else f"GPU total {total}"


def plan_lines(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The model, the spike, the calibration, the arithmetic, the choice, the warnings and the remedies."""
    lines: list[tuple[str, str]] = []
    if doc.get("model"):
        lines.append(("model", _model(doc["model"])))
        if draft := doc["model"].get("draft"):
            lines.append(("draft", _draft(draft)))
    if doc.get("spike"):
        lines.append(("spike", _spike(doc["spike"])))
    lines += [("calibration", f"{c['text']} at {c['fraction']:g} ({c['source']})") for c in doc.get("calibration", [])]
    lines += [("why", reason) for reason in doc.get("reasons", [])]
    lines += [("note", note) for note in doc.get("notes", [])]
    if vllm := doc.get("vllm"):  # a vLLM unit: the total's source and the max_model_len floor
        lines.append(("vllm", _vllm(vllm)))
    choice = doc.get("choice")
    if choice:
        flags = doc.get("flags") or {}
        alloc = f" PYTORCH_CUDA_ALLOC_CONF={choice['alloc_conf']}" if choice.get("alloc_conf") else ""
        tokens = format_tokens(choice["max_total_num_tokens"], doc.get("target_tokens"))
        pool = engine_named(doc.get("engine")).capacity_name
        lines.append(
            (
                "choice",
                f"{flags.get('fraction', '--mem-fraction-static')} {choice['mem_fraction_static']:g} "
                f"{flags.get('chunk', '--chunked-prefill-size')} {choice['chunked_prefill_size']}{alloc} → {pool} "
                f"{tokens}",
            )
        )
    lines += [("warning", warning) for warning in doc.get("warnings", [])]
    lines += [("or", f"{r['flag']} {r['value']} ({r['reason']})") for r in doc.get("remedies", [])]
    return lines


_GIB = float(1 << 30)


def _gib(value: float | int | None) -> str:
    return "-" if value is None else f"{value / _GIB:.2f}"


def _fit_cell(fit: dict[str, Any] | None) -> str:
    if fit is None:
        return "-"
    if fit["fits"]:
        margin = fit["margin"]
        return "[green]yes[/green]" + ("" if margin is None else f" +{margin * 100:.0f}%")
    spare = fit["spare_bytes"]
    return "[red]no[/red] " + (f"short {-spare / _GIB:.2f} GiB" if spare < 0 else "under the margin")


def _knob_text(chunk: int | None, expandable: bool | None) -> str:
    text = f"chunk {chunk}" if chunk and chunk > 0 else "no chunk"
    return text + (" +exp" if expandable else "")


def plan_table(console: Console, doc: dict[str, Any], *, title: str = "plan") -> None:
    """Fraction → predicted tokens → max_req_input_len → headroom → does the diagnosed spike fit; the choice marked."""
    current = doc.get("current") or {}
    proposed = doc.get("proposed") or {}
    now_label = "fits now (" + _knob_text(current.get("chunked_prefill_size"), current.get("expandable_segments")) + ")"
    new_label = "fits " + _knob_text(proposed.get("chunked_prefill_size"), proposed.get("expandable_segments"))
    rows = doc.get("rows", [])
    has_fit = any(r["fits_current"] or r["fits_proposed"] for r in rows)
    engine = engine_named(doc.get("engine"))  # the fraction's own name; vLLM: a request's limit is not the pool's
    columns = [engine.fraction_heading, "tokens", "max_req_input_len", "headroom GiB", "usable GiB", now_label,
               new_label, ""]  # fmt: skip
    if not engine.has_pool_request_limit:
        columns.remove("max_req_input_len")
    if not has_fit:  # no diagnosed spike (or no overhead known): nothing to fit
        columns = [c for c in columns if c not in (now_label, new_label)]
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column in ("tokens", "max_req_input_len") else "left")
    for row in rows:
        marks = []
        if row["chosen"]:
            marks.append("[bold]◀ choice[/bold]")
        if row["current"]:
            marks.append("current")
        if row["mem_fraction_static"] == doc.get("target_fraction"):
            marks.append("target")
        if row["usable_bytes"] is not None and row["usable_bytes"] < 0:
            marks.append("no room for CUDA graphs")
        viable = row["viable"]
        cells = [
            f"{row['mem_fraction_static']:g}",
            f"{row['max_total_num_tokens']:,}" if viable else "[red]won't start[/red]",
            f"{row['max_req_input_len']:,}" if viable else "-",
            _gib(row["headroom_bytes"]),
            _gib(row["usable_bytes"]),
        ]
        if not engine.has_pool_request_limit:
            del cells[2]
        if has_fit:
            cells += [_fit_cell(row["fits_current"]), _fit_cell(row["fits_proposed"])]
        table.add_row(*cells, ", ".join(marks))
    console.print(table)
    for label, text in plan_lines(doc):
        style = {"choice": "bold", "warning": "yellow"}.get(label)
        tag = f"[{style}]{label}[/{style}]" if style else label
        console.print(f"  {tag}{' ' * max(1, 8 - len(label))}{escape(text)}", highlight=False)


def plan_report(console: Console, results: Sequence[HostResult]) -> None:
    """`remediate plan`: per host, the table and its explanation."""
    for r in results:
        if r.error:
            console.print(f"[bold]{escape(r.host)}[/bold] [red]error[/red] {escape(r.error)}", highlight=False)
            continue
        plan: dict[str, Any] = r.plan or {}
        plan_table(console, plan, title=f"{r.host} {r.unit or ''}: plan")
        if source := r.source:  # --journal: a saved journal, no live host
            names = source["absent"]
            absent = ", ".join(str(name) for name in names) if isinstance(names, list) else ""
            console.print(
                f"  source  saved journal {escape(str(source['journal']))} ({source['format']}); absent: {absent}"
            )
            for note in (n for n in r.notes[1:] if n not in plan.get("notes", [])):
                console.print(f"  note    {escape(note)}", highlight=False)
        for warning in r.warnings:
            if warning not in plan.get("warnings", []):
                console.print(f"  [yellow]warning[/yellow] {escape(warning)}", highlight=False)
