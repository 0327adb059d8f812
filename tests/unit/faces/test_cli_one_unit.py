"""The commands that work on one unit per host (`watch`, `bench`) refuse a glob or several names — from the
command line or from an inventory's `unit:` — as bad input naming the host, before any host is contacted."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from remediate.cli import cli


@pytest.mark.parametrize("unit", ["sglang@*", "sglang-chat,sglang-embed"])
def test_watch_refuses_an_inventory_unit_glob_naming_the_host(unit: str, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    # 127.0.0.9: nothing listens there; the refusal must come before any connection
    inventory.write_text(f"hosts:\n  gpu-07:\n    address: 127.0.0.9\n    unit: '{unit}'\n")
    argv = ["watch", "run", "all", "-i", str(inventory), "--once", "--state-dir", str(tmp_path / "state")]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "gpu-07" in lines[0] and unit.split(",")[0] in lines[0] and "one unit" in lines[0], lines
    assert not (tmp_path / "state" / "watch-audit.jsonl").exists()
