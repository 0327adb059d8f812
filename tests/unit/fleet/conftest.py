"""Fixtures of the rollout tests that run the real api over fake hosts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.hosts import FLEET_NAMES as NAMES


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An inventory of NAMES (documentation addresses: nothing is ever dialled) in a fresh working directory."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"hosts": {name: {"address": f"192.0.2.{i + 1}"} for i, name in enumerate(NAMES)}}))
    return path


@pytest.fixture
def txlog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The controller's transactions.jsonl in a fresh state directory of this test's own."""
    controller = tmp_path / "controller"
    controller.mkdir()
    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(controller))
    return controller / "transactions.jsonl"
