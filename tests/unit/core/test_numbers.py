"""core/numbers.py: the one tolerant reader of numbers, with the modes its callers use — JSON-only (bench's
server limits, the budget's server_args), JSON or text (/server_info), text as int()/float() read it (a unit's
flags, ``systemctl show``'s NRestarts)."""

from __future__ import annotations

import math

import pytest

from remediate.core.numbers import as_float, as_int


@pytest.mark.parametrize(
    ("value", "plain", "text", "json"),
    [
        (5, 5, 5, 5),
        (-1, -1, -1, -1),  # chunked_prefill_size=-1: chunking off, a value like any other
        (True, None, None, None),  # a JSON true is not 1
        (False, None, None, None),
        (None, None, None, None),
        (206635.0, None, None, 206635),
        (2.5, None, None, None),
        (math.inf, None, None, None),
        ("12", None, 12, 12),
        (" 12\n", None, 12, 12),
        ("-3", None, -3, -3),
        ("1_000", None, 1000, 1000),  # as sglang's argparse type=int reads a flag
        ("", None, None, None),
        ("1.5", None, None, None),
        ("inf", None, None, None),
        ("twelve", None, None, None),
        ([1], None, None, None),
    ],
)
def test_as_int(value: object, plain: int | None, text: int | None, json: int | None) -> None:
    assert as_int(value) == plain
    assert as_int(value, text=True) == text
    assert as_int(value, text=True, whole_float=True) == json


@pytest.mark.parametrize(
    ("value", "plain", "text"),
    [
        (0.93, 0.93, 0.93),
        (1, 1.0, 1.0),
        (True, None, None),
        (None, None, None),
        ("0.93", None, 0.93),
        (" -2.5 ", None, -2.5),
        ("x", None, None),
        ("", None, None),
        ({"a": 1}, None, None),
    ],
)
def test_as_float(value: object, plain: float | None, text: float | None) -> None:
    assert as_float(value) == plain
    assert as_float(value, text=True) == text


def test_text_floats_take_what_float_takes() -> None:
    assert as_float("inf", text=True) == math.inf
    nan = as_float("nan", text=True)
    assert nan is not None and math.isnan(nan)
    assert as_float("inf") is None
