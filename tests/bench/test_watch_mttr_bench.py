"""bench/watch_mttr.py's reduced run (`slow`; its numbers are read by people, not asserted): one version that
lingers, one short load, the table printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_mttr_bench_prints_its_table(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    run = subprocess.run([sys.executable, str(BENCH / "watch_mttr.py"), "--versions", "0.5.23", "--loads", "3",
                          "--json", str(out)], capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    if run.stdout.startswith("skipped:"):
        pytest.skip(run.stdout.strip())
    assert "OOM line → decided s" in run.stdout, run.stdout
    (row,) = json.loads(out.read_text())
    assert row["version"] == "0.5.23" and row["told_by"] == "fatal line", row
