"""Fixtures of the rollout tests that run the real api over fake hosts."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import tenacity
import yaml

NAMES = ("gpu-a01", "gpu-a02", "gpu-a03")


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """The health wait backs off with tenacity: no real naps."""
    monkeypatch.setattr(tenacity.nap, "time", types.SimpleNamespace(sleep=lambda _: None))


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
