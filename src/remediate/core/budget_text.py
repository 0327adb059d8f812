"""PURE: the explanation under a plan table, one ``(label, text)`` line each, from the plan document.

Labels: ``model``, ``spike``, ``calibration``, ``why``, ``note``, ``choice``, ``warning``, ``or``; the
human renderer styles them, the text carries no markup.
"""

from __future__ import annotations

from typing import Any


def tokens_against(tokens: int, target: int | None) -> str:
    """``209,007 (target 200,000: +4.5%)``."""
    if not target:
        return f"{tokens:,}"
    gap = (tokens - target) / target
    return f"{tokens:,} (target {target:,}: {'−' if gap < 0 else '+'}{abs(gap) * 100:.1f}%)"


def _model(model: dict[str, Any]) -> str:
    anchor = model.get("anchor")
    fitted = f" (fitted to {anchor['tokens']:,} at {anchor['fraction']:g})" if anchor else ""
    return (
        f"free {model['free0_gib']:.2f} GiB before weights, {model['free1_gib']:.2f} after{fitted}; "
        f"KV cell {model['cell_bytes']:,.0f} B/token; page {model['page_size']}; "
        f"starts from {model['min_viable_fraction']:.4f}"
    )


def _spike(spike: dict[str, Any]) -> str:
    per_token = spike["per_token_bytes"]
    per = f" = {per_token / 1024:.1f} KiB/token" if per_token else ""
    at = f" (at {spike['fraction']:g})" if spike.get("fraction") else ""
    return (
        f"{spike['tried_bytes'] / 2**20:.0f} MiB for {spike['prefill_tokens'] or 0:,} prefill tokens{per}; "
        f"{spike['reserved_unallocated_bytes'] / 2**20:.0f} MiB reserved but unallocated{at}"
    )


def plan_lines(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The model, the spike, the calibration, the arithmetic, the choice, the warnings and the remedies."""
    lines: list[tuple[str, str]] = []
    if doc.get("model"):
        lines.append(("model", _model(doc["model"])))
    if doc.get("spike"):
        lines.append(("spike", _spike(doc["spike"])))
    lines += [("calibration", f"{c['text']} at {c['fraction']:g} ({c['source']})") for c in doc.get("calibration", [])]
    lines += [("why", reason) for reason in doc.get("reasons", [])]
    lines += [("note", note) for note in doc.get("notes", [])]
    choice = doc.get("choice")
    if choice:
        alloc = f" PYTORCH_CUDA_ALLOC_CONF={choice['alloc_conf']}" if choice.get("alloc_conf") else ""
        tokens = tokens_against(choice["max_total_num_tokens"], doc.get("target_tokens"))
        lines.append(
            (
                "choice",
                f"--mem-fraction-static {choice['mem_fraction_static']:g} "
                f"--chunked-prefill-size {choice['chunked_prefill_size']}{alloc} → max_total_num_tokens {tokens}",
            )
        )
    lines += [("warning", warning) for warning in doc.get("warnings", [])]
    lines += [("or", f"{r['flag']} {r['value']} ({r['reason']})") for r in doc.get("remedies", [])]
    return lines
