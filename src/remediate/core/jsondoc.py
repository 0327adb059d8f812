"""PURE: JSON from a server that is not trusted, bounded in nesting depth.

CPython's ``json`` decoder recurses once per nesting level: ``[[[[…]]]]`` 100 000 deep raises
``RecursionError`` (``Py_EnterRecursiveCall`` in Modules/_json.c), and a document a few hundred levels deep
parses but breaks whatever walks it recursively later (``json.dumps`` of a run's record). sglang's answers
are a few levels deep (``/server_info``: ``internal_states`` → list → dict), so a document nested deeper
than :data:`MAX_DEPTH` is refused as a bad answer (:class:`DocumentError`) before any recursive code of
ours sees it: the decoder's own RecursionError is caught where it is raised, and what it parsed is measured
without recursion.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64


class DocumentError(ValueError):
    """Not a JSON document we accept (bad JSON, or nested deeper than the limit)."""


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` deep: an explicit stack, no recursion."""
    todo: list[tuple[Any, int]] = [(data, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        todo.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_document(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(raw)``, refusing (DocumentError) bad JSON and documents nested deeper than ``max_depth``."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise DocumentError(f"JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise DocumentError(f"not JSON: {exc}") from None
    if _deeper_than(data, max_depth):
        raise DocumentError(f"JSON nested deeper than {max_depth} levels")
    return data
