"""Change reports: unified diffs, flag-level summaries and JSON, with secrets masked."""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict
from typing import Any

from remediate.core.unitfile.edit import EditPlan, Settings

# NAME=VALUE where NAME looks secret; NAME starts a word (after a blank, a quote, '=', a shell operator)
# or follows docker's attached ``-e`` (``-eHF_TOKEN=x``).
_SECRET_ASSIGNMENT = re.compile(
    r"""(?:(?<![A-Za-z0-9_\\-])|(?<=-e))"""
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_]*?(?:_TOKEN|_KEY|_SECRET)|[A-Za-z0-9_]*PASSWORD[A-Za-z0-9_]*|TOKEN|SECRET)=""",
    re.IGNORECASE | re.MULTILINE,
)
# Command-line flags that carry secrets: --api-key VALUE, --hf-token=VALUE, --db-password "VALUE".
_SECRET_FLAG = re.compile(
    r"(?<![A-Za-z0-9-])--(?:[A-Za-z0-9-]*-)?(?:key|token|secret|password|passwd)(?P<sep>=|(?:[ \t]|\\\r?\n)+)",
    re.IGNORECASE,
)
# Credentials in URLs: scheme://user:password@host.
_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'\"]*):(?P<secret>[^/\s@'\"]+)@")
# Control characters other than tab and line ends are shown escaped (a NUL byte never reaches a terminal).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MASK = "***"


def flag_values(settings: Settings) -> dict[str, str | None]:
    """The server flags we manage, keyed by sglang's ServerArgs names (the JSON ``flags`` block)."""
    return {"mem_fraction_static": settings.mem_fraction_static, "chunked_prefill_size": settings.chunked_prefill_size}


def env_values(settings: Settings) -> dict[str, str | None]:
    """The environment we manage (the JSON ``env`` block)."""
    return {"PYTORCH_CUDA_ALLOC_CONF": settings.alloc_conf}


def _word_end(text: str, start: int, quote: str = "") -> int:
    """End of the value starting at ``start``: to the next blank outside quotes, or to ``quote`` (the
    quote around the whole assignment). Backslash escapes are skipped; a quote without a partner on the
    line ends the value (it closes an outer string, such as ``bash -c '…'``)."""
    pos = start
    n = len(text)
    while pos < n and text[pos] not in "\r\n":
        char = text[pos]
        if quote and char == quote:
            break
        if char == "\\":
            if text[pos + 1 : pos + 2] in ("\r", "\n", ""):
                break  # a line continuation ends the word
            pos += 2
            continue
        if not quote and char in " \t;&|)":
            break
        if char in "\"'" and not quote:
            close = pos + 1
            while close < n and text[close] not in "\r\n" and text[close] != char:
                close += 2 if text[close] == "\\" else 1
            if close >= n or text[close] != char:
                break
            pos = close + 1
            continue
        pos += 1
    return min(pos, n)


def _masked(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{MASK}{value[0]}"
    if value[:1] in ("'", '"'):  # a quoted value followed by punctuation (``api_key='…',`` in a repr)
        close = value.find(value[0], 1)
        tail = value[close + 1 :] if close > 0 else ""
        if tail and tail.strip(",)]}") == "":
            return f"{value[0]}{MASK}{value[0]}{tail}"
    return MASK


def mask_secrets(text: str) -> str:
    """Replace every secret value with ``***``: secret-looking ``NAME=VALUE`` assignments (unit,
    environment file, ``docker -e``, ``env``, shell ``export``), secret flags (``--api-key VALUE``, quoted
    or not, inside ``bash -c`` strings too) and passwords in URLs."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('head')}:{MASK}@", text)
    spans: list[tuple[int, int]] = []
    for match in _SECRET_ASSIGNMENT.finditer(text):
        start = match.end()
        before = text[match.start() - 1] if match.start() else ""
        quote = before if before in "\"'" else ""
        spans.append((start, _word_end(text, start, quote)))
    for match in _SECRET_FLAG.finditer(text):
        start = match.end()
        if start < len(text) and text[start] not in "-\r\n":
            spans.append((start, _word_end(text, start)))
    out: list[str] = []
    pos = 0
    for start, end in sorted(spans):
        if start < pos or end <= start:
            continue
        out.append(text[pos:start] + _masked(text[start:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)


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


def summary_lines(plan: EditPlan) -> list[str]:
    """One line per changed setting: ``--mem-fraction-static 0.94 → 0.93 (ExecStart=)``."""
    lines = []
    for change in plan.changes:
        old = display_text(change.old or "(unset)")
        new = display_text(change.new or "(unset)")
        lines.append(f"{change.setting} {old} → {new} ({change.where})")
    return lines


def plan_to_dict(plan: EditPlan) -> dict[str, Any]:
    """The plan as JSON-ready data, secrets masked (diffs instead of file texts)."""
    data: dict[str, Any] = mask_data(
        {
            "changed": plan.is_changed,
            "changes": [asdict(change) for change in plan.changes],
            "notes": list(plan.notes),
            "before": asdict(plan.before),
            "after": asdict(plan.after),
            "files": [{"path": f.path, "diff": unified_diff(f.path, f.old_text, f.new_text)} for f in plan.files],
        }
    )
    return data
