"""Change reports: unified diffs, flag-level summaries and JSON, with secrets masked."""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict
from typing import Any

from remediate.core.engines import engine_named
from remediate.core.unitfile.edit import UnitEdit, UnitSettings
from remediate.core.unitfile.secrets import MASK, mask_secrets

__all__ = ["MASK", "display_text", "mask_data", "mask_secrets", "plan_to_dict", "summary_lines", "unified_diff"]

# Control characters other than tab and line ends are shown escaped (a NUL byte never reaches a terminal).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def flag_values(settings: UnitSettings) -> dict[str, str | None]:
    """The server flags we manage, keyed by the engine's own names (the JSON ``flags`` block): sglang's
    ServerArgs ``mem_fraction_static``/``chunked_prefill_size``, vLLM's ``gpu_memory_utilization``/
    ``max_num_batched_tokens``."""
    engine = engine_named(settings.engine)
    return {engine.fraction_key: settings.mem_fraction_static, engine.prefill_key: settings.chunked_prefill_size}


def env_values(settings: UnitSettings) -> dict[str, str | None]:
    """The environment we manage (the JSON ``env`` block)."""
    return {"PYTORCH_CUDA_ALLOC_CONF": settings.alloc_conf}


def display_text(text: str) -> str:
    """``text`` as it may be shown: secrets masked, control characters (NUL…) written as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", mask_secrets(text))


def mask_data(data: Any) -> Any:
    """Every string inside JSON-ready ``data`` passed through ``display_text``."""
    if isinstance(data, str):
        return display_text(data)
    if isinstance(data, dict):
        return {key: mask_data(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [mask_data(value) for value in data]
    return data


def unified_diff(path: str, old: str, new: str) -> str:
    """A unified diff of one file, secrets masked."""
    old_lines = display_text(old).splitlines(keepends=True)
    new_lines = display_text(new).splitlines(keepends=True)
    name = path.lstrip("/")
    lines = list(difflib.unified_diff(old_lines, new_lines, f"a/{name}", f"b/{name}"))
    fixed = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
    return "".join(fixed)


def summary_lines(plan: UnitEdit) -> list[str]:
    """One line per changed setting: ``--mem-fraction-static 0.94 → 0.93 (ExecStart=)``."""
    lines = []
    for change in plan.changes:
        old = display_text(change.old or "(unset)")
        new = display_text(change.new or "(unset)")
        lines.append(f"{change.setting} {old} → {new} ({change.where})")
    lines += [display_text(kept) for kept in plan.kept]  # what the recipe leaves alone here, and why
    return lines


def plan_to_dict(plan: UnitEdit) -> dict[str, Any]:
    """The plan as JSON-ready data, secrets masked (diffs instead of file texts)."""
    data: dict[str, Any] = mask_data(
        {
            "changed": plan.is_changed,
            "changes": [asdict(change) for change in plan.changes],
            "notes": list(plan.notes),
            "kept": list(plan.kept),
            "before": asdict(plan.before),
            "after": asdict(plan.after),
            "files": [{"path": f.path, "diff": unified_diff(f.path, f.old_text, f.new_text)} for f in plan.files],
        }
    )
    return data
