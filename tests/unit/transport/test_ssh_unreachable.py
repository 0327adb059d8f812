"""A host nobody listens on: retried briefly, then `unreachable` and exit 3 (real sockets, loopback only)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: connections are refused


def test_refused_connection_is_unreachable_exit_3(tmp_path: Path) -> None:
    port = _closed_port()
    known = tmp_path / "known_hosts"
    known.write_text("")
    run = subprocess.run(
        [sys.executable, "-m", "remediate", "status", f"root@127.0.0.1:{port}", "--known-hosts", str(known), "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr
    [result] = json.loads(run.stdout)["results"]
    assert result["outcome"] == "unreachable"
    assert "connection refused" in result["error"]
    assert result["host"] == f"root@127.0.0.1:{port}"
