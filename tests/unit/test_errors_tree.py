"""The exception tree drawn in errors.py's docstring is the tree the classes form (the doc cannot drift)."""

from __future__ import annotations

import re

from remediate import errors


def _drawn() -> dict[str, str | None]:
    """Each class the docstring draws → its drawn parent (None for the root), from the tree's indentation."""
    doc = errors.__doc__ or ""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        m = re.match(r"^(\s*)(?:[├└]─ )?(\w+Error|ConnectionLost)\b", line.replace("│", " "))
        if not m or not line.strip():
            continue
        depth = m.start(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[m.group(2)] = stack[-1][1] if stack else None
        stack.append((depth, m.group(2)))
    return parents


def _public_parent(cls: type) -> str | None:
    for base in cls.__mro__[1:]:
        if base is Exception:
            return None
        if not base.__name__.startswith("_"):
            return base.__name__
    return None


def test_every_public_exception_is_drawn_under_its_real_parent() -> None:
    drawn = _drawn()
    real = {
        name: _public_parent(cls)
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.RemediateError) and not name.startswith("_")
    }
    assert drawn == real


def test_the_drawing_is_read_as_a_tree() -> None:
    assert _drawn()["LockHeldError"] == "ConflictError" and _drawn()["RemediateError"] is None
