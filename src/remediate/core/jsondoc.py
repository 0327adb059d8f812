"""PURE: JSON from a server that is not trusted, bounded in nesting depth.

CPython's ``json`` decoder recurses once per nesting level: ``[[[[…]]]]`` 100 000 deep raises
``RecursionError`` (``Py_EnterRecursiveCall`` in Modules/_json.c), and a document a few hundred levels deep
parses but breaks whatever walks it recursively later (``json.dumps`` of a run's record). sglang's answers
are a few levels deep (``/server_info``: ``internal_states`` → list → dict), so anything deeper than
:data:`MAX_DEPTH` is refused as a bad answer before any recursive code sees it.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64


class DocumentError(ValueError):
    """Not a JSON document we accept (bad JSON, or nested deeper than the limit)."""


def _depth_within(raw: bytes | str, limit: int) -> bool:
    """Whether brackets outside strings nest at most ``limit`` deep: one linear scan, no recursion."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if text.count("[") + text.count("{") <= limit:
        return True  # fewer openers than the limit: no need to look closer (most of sglang's answers)
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def parse_document(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(raw)``, refusing (DocumentError) bad JSON and documents nested deeper than ``max_depth``."""
    if not _depth_within(raw, max_depth):
        raise DocumentError(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise DocumentError(f"not JSON: {exc}") from None
