"""The benchmarks still run and print their tables (`slow`; numbers are read by people, not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    ("script", "args", "header"),
    [
        ("sandbox_bringup.py", ["1", "4"], "bring-up s"),
        ("fleet_forks.py", ["4"], "wall s"),
    ],
)
def test_benchmark_prints_its_table(script: str, args: list[str], header: str) -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert header in run.stdout
    lines = run.stdout.splitlines()
    header_at = next(i for i, line in enumerate(lines) if header in line)
    rows = [line for line in lines[header_at + 1 :] if line.strip()]
    assert len(rows) >= 2, run.stdout
