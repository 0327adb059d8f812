"""PURE: the range, type and unit of every numeric option the faces share, in one table, with one message.

The command line (click callbacks, cli/options.py), the Python API (the request dataclasses' and
``RunOptions``' ``__post_init__``, api/) and the Ansible modules (through the API, failed with the same text)
all call :func:`check_option`: a bad value is one :class:`~remediate.errors.ConfigError` line naming the
command line's flag, the same words from each face, before any host is contacted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from remediate.core.numbers import as_float, as_int
from remediate.errors import ConfigError


@dataclass(frozen=True)
class Bound:
    """One option: its command-line flag, whether it is whole, its least and greatest value, its unit."""

    flag: str
    is_whole: bool
    low: float
    high: float | None
    unit: str


# Every value is ≥ 1: a zero timeout would give up before the first poll (``wait_timeout=0`` restarted the
# server and rolled it back before it could answer), a negative one would fail at once ("nvidia-smi timed out").
# The nvidia-smi bound stays well under the 60 s that bounds the whole read of the host (templates/probe.sh.j2).
BOUNDS: dict[str, Bound] = {
    "wait_timeout": Bound("--wait-timeout", False, 1, None, "seconds"),
    "timeout": Bound("--timeout", False, 1, None, "seconds"),  # the deprecated spelling of --wait-timeout
    "lock_timeout": Bound("--lock-timeout", True, 1, None, "seconds"),
    "smi_timeout": Bound("--smi-timeout", True, 1, 30, "seconds"),
    "connect_timeout": Bound("--connect-timeout", False, 1, None, "seconds"),
    "probe": Bound("--probe", True, 1, None, "tokens"),
    "min_tokens": Bound("--min-tokens", True, 1, None, "tokens"),
    "target_tokens": Bound("--target-tokens", True, 1, None, "tokens"),
    "forks": Bound("--forks", True, 1, None, "hosts"),
    "lines": Bound("--lines", True, 1, None, "lines"),
}


def _show(number: float) -> str:
    return f"{number:g}"


def check_option(name: str, value: object, *, text: bool = False) -> int | float:
    """``value`` of the option ``name`` (a key of :data:`BOUNDS`) as its type, or a ConfigError saying what
    it must be. ``text``: a string is read as the command line gives it (``"30"``); the API and the Ansible
    modules pass numbers (a ``bool`` is never a number)."""
    bound = BOUNDS[name]
    kind = "a whole number" if bound.is_whole else "a number"
    number: int | float | None = as_int(value, text=text) if bound.is_whole else as_float(value, text=text)
    if number is None and bound.is_whole and (whole := as_float(value, text=text)) is not None:
        if whole.is_integer():
            number = int(whole)  # 30.0 from YAML or a float field: thirty
    if number is None or (isinstance(number, float) and not math.isfinite(number)):
        raise ConfigError(f"{bound.flag} must be {kind} of {bound.unit}, got {value}")
    if number < bound.low or (bound.high is not None and number > bound.high):
        span = (
            f"at least {_show(bound.low)}" if bound.high is None else f"from {_show(bound.low)} to {_show(bound.high)}"
        )
        raise ConfigError(f"{bound.flag} must be {span} ({bound.unit}), got {_show(number)}")
    return number


def check_options(**values: object) -> None:
    """:func:`check_option` for each value given that is not None (None: the default)."""
    for name, value in values.items():
        if value is not None:
            check_option(name, value)
