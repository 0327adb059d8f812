"""The watcher's clock: a wall time that is never stepped back within a run (the rails' cooldown, cap and
breaker window are measured on it)."""

from __future__ import annotations

import time
from collections.abc import Callable


class SteadyClock:
    """The wall time read once at the start plus the monotonic time elapsed since (CLOCK_MONOTONIC: NTP
    slews and a person's `date -s` move the wall clock, never this): epoch seconds, never decreasing. A long
    run drifts from the wall clock by the clock's corrections; the rails want intervals, which this keeps."""

    def __init__(self, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._wall0 = wall()
        self._mono0 = monotonic()
        self._last = self._wall0

    def __call__(self) -> float:
        self._last = max(self._last, self._wall0 + (self._monotonic() - self._mono0))
        return self._last
