"""PURE: numbers from places that may hold anything — a JSON answer, a unit's flag, a ``systemctl show`` value.

Each reader says what it takes; what it does not take reads as absent (None), never as an error. A JSON
``true`` is never the number 1 (``bool`` is an ``int`` in Python). Text is read as Python's ``int()`` and
``float()`` read it — what sglang's argparse (``type=int``/``type=float``) and systemd's counters accept: signs,
surrounding blanks, ``1_000``; ``float`` also takes ``inf`` and ``nan``.
"""

from __future__ import annotations


def as_int(value: object, *, text: bool = False, whole_float: bool = False) -> int | None:
    """``value`` as an int: an ``int`` (never a ``bool``); with ``text``, a string ``int()`` reads; with
    ``whole_float``, a float without a fraction (``206635.0``). Anything else: None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if whole_float and isinstance(value, float) and value.is_integer():
        return int(value)
    if text and isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def as_float(value: object, *, text: bool = False) -> float | None:
    """``value`` as a float: an ``int`` or ``float`` (never a ``bool``); with ``text``, a string ``float()``
    reads. Anything else: None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if text and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
