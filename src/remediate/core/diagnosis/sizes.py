"""Byte sizes as torch and sglang print them, and back."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

_UNITS = {"bytes": 1, "byte": 1, "B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": 1 << 40, "PiB": 1 << 50}
SIZE = r"\d+(?:\.\d+)? (?:bytes|KiB|MiB|GiB|TiB|PiB)"
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?) ?(bytes|byte|B|KiB|MiB|GiB|TiB|PiB)$")


def parse_size(text: str) -> int | None:
    """``"896.00 MiB"`` → 939524096 (exact decimal arithmetic, rounded to the byte); None if not a size."""
    match = _SIZE_RE.fullmatch(text.strip())
    if not match:
        return None
    try:
        value = Decimal(match.group(1)) * _UNITS[match.group(2)]
    except InvalidOperation:  # pragma: no cover - the regex admits only plain decimals
        return None
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def gib_to_bytes(text: str) -> int | None:
    """sglang's ``X.YZ GB`` numbers are GiB (``/ (1 << 30)``)."""
    try:
        return int((Decimal(text) * GIB).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    except InvalidOperation:
        return None


def format_size(size: int) -> str:
    """Like torch's ``format_size`` (bytes, KiB, MiB, GiB with two decimals); negative sizes keep the sign."""
    if size < 0:
        return "-" + format_size(-size)
    if size <= 1024:
        return f"{size} bytes"
    if size <= MIB:
        return f"{size / KIB:.2f} KiB"
    if size <= GIB:
        return f"{size / MIB:.2f} MiB"
    return f"{size / GIB:.2f} GiB"
