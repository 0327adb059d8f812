"""Change reports: unified diffs, flag-level summaries and JSON, with secrets masked."""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict
from typing import Any

from remediate.core.unitfile.edit import EditPlan, Settings

# NAME=VALUE where NAME looks secret; NAME follows a line start, blank, quote or '=' (--env=NAME=…).
_SECRET_ASSIGNMENT = re.compile(
    r"""(?P<lead>^|[\s"'=])(?P<name>[A-Za-z_][A-Za-z0-9_]*?(?:_TOKEN|_KEY|_SECRET)|[A-Za-z0-9_]*PASSWORD[A-Za-z0-9_]*)=""",
    re.IGNORECASE | re.MULTILINE,
)
# Command-line flags that carry secrets: --api-key VALUE, --hf-token=VALUE, --db-password VALUE.
_SECRET_FLAG = re.compile(
    r"(?P<flag>--[A-Za-z0-9-]*(?:-key|-token|-secret|password))(?P<sep>[= ]+)(?P<value>[^\s\"'\\]+)"
)
MASK = "***"


def flag_values(settings: Settings) -> dict[str, str | None]:
    """The server flags we manage, keyed by sglang's ServerArgs names (the JSON ``flags`` block)."""
    return {"mem_fraction_static": settings.mem_fraction_static, "chunked_prefill_size": settings.chunked_prefill_size}


def env_values(settings: Settings) -> dict[str, str | None]:
    """The environment we manage (the JSON ``env`` block)."""
    return {"PYTORCH_CUDA_ALLOC_CONF": settings.alloc_conf}


def _value_end(text: str, start: int, quote: str) -> int:
    """End of a value starting at ``start``; ``quote`` is the quote enclosing the assignment, if any."""
    if start < len(text) and text[start] in "\"'" and not quote:
        close = text.find(text[start], start + 1)
        return len(text) if close < 0 else close + 1
    pos = start
    while pos < len(text) and text[pos] != "\n" and (quote or not text[pos].isspace()) and text[pos] != (quote or "\0"):
        pos += 2 if text[pos] == "\\" and quote else 1
    return min(pos, len(text))


def mask_secrets(text: str) -> str:
    """Replace the value of every secret-looking env assignment and secret flag with ``***``."""
    out: list[str] = []
    pos = 0
    for match in _SECRET_ASSIGNMENT.finditer(text):
        if match.start() < pos:
            continue
        lead = match.group("lead")
        start = match.end()
        end = _value_end(text, start, lead if lead in "\"'" and lead else "")
        value = text[start:end]
        masked = f"{value[0]}{MASK}{value[0]}" if len(value) >= 2 and value[0] in "\"'" else MASK
        out.append(text[pos:start] + masked)
        pos = end
    out.append(text[pos:])
    return _SECRET_FLAG.sub(lambda m: f"{m.group('flag')}{m.group('sep')}{MASK}", "".join(out))


def unified_diff(path: str, old: str, new: str) -> str:
    """A unified diff of one file, secrets masked."""
    old_lines = mask_secrets(old).splitlines(keepends=True)
    new_lines = mask_secrets(new).splitlines(keepends=True)
    name = path.lstrip("/")
    lines = list(difflib.unified_diff(old_lines, new_lines, f"a/{name}", f"b/{name}"))
    fixed = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
    return "".join(fixed)


def summary_lines(plan: EditPlan) -> list[str]:
    """One line per changed setting: ``--mem-fraction-static 0.94 → 0.93 (ExecStart=)``."""
    lines = []
    for change in plan.changes:
        old = mask_secrets(change.old or "(unset)")
        new = mask_secrets(change.new or "(unset)")
        lines.append(f"{change.setting} {old} → {new} ({change.where})")
    return lines


def plan_to_dict(plan: EditPlan) -> dict[str, Any]:
    """The plan as JSON-ready data, secrets masked (diffs instead of file texts)."""
    return {
        "changed": plan.is_changed,
        "changes": [asdict(change) for change in plan.changes],
        "notes": list(plan.notes),
        "before": asdict(plan.before),
        "after": asdict(plan.after),
        "files": [{"path": f.path, "diff": unified_diff(f.path, f.old_text, f.new_text)} for f in plan.files],
    }
