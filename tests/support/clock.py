"""The tests' clock: pauses recorded instead of slept.

Code that waits takes its ``sleep`` as an argument (``wait_healthy(..., sleep=)``, ``remediate_host(..., sleep=)``,
the host run's ``Timer``), defaulting to ``time.sleep``; a test passes the ``naps`` fixture and asserts on the
pauses the code would have taken, with no real sleep and no patching of tenacity."""

from __future__ import annotations

import pytest


class Naps(list[float]):
    """A ``sleep`` that records each pause (seconds) instead of taking it."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def naps() -> Naps:
    """A fresh recording ``sleep`` (pass it where the code takes ``sleep=``; it is the list of the pauses)."""
    return Naps()
