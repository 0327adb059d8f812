"""Fixtures of the rollout tests that run the real api over fake hosts."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
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


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (KeyboardInterrupt in the main thread) for a test that presses Ctrl-C: a test run
    earlier in the same worker may have left another (a library that installs its own and keeps it); the one found
    is named on stderr (shown if the test fails) and put back after the test."""
    found = signal.getsignal(signal.SIGINT)
    if found is not signal.default_int_handler:
        print(f"SIGINT handler in this worker was {found!r}: Python's default put in for the test", file=sys.stderr)
    assert threading.current_thread() is threading.main_thread()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, found)
