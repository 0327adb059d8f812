"""Fixture ``start``: stand-in servers as subprocesses, each stopped by PID at teardown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.standin_proc import Server


@pytest.fixture
def start(tmp_path: Path) -> Iterator:
    servers: list[Server] = []

    def _start(args: list[str], knobs: dict | None = None, **kw: object) -> Server:
        srv = Server(tmp_path, args, knobs or {}, **kw)  # type: ignore[arg-type]
        servers.append(srv)
        return srv

    yield _start
    for srv in servers:
        srv.stop()
