"""A host nobody listens on: retried briefly, then `unreachable` and exit 3 (real sockets, loopback only)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from remediate.errors import ConnectError
from remediate.transport.base import SSHOptions
from remediate.transport.ssh import SSHTransport
from tests.support.clock import Naps

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


def test_a_refused_connection_is_retried_with_capped_pauses_taken_by_the_given_sleep(
    tmp_path: Path, naps: Naps
) -> None:
    """connect_attempts=3: two pauses between three refused connects, jittered and capped at 2 s, taken by the
    transport's ``sleep`` (recorded here, not slept)."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    options = SSHOptions(known_hosts=str(known), connect_attempts=3)
    transport = SSHTransport(f"root@127.0.0.1:{_closed_port()}", options, sleep=naps)
    try:
        with pytest.raises(ConnectError, match="connection refused"):
            transport.open()
    finally:
        transport.close()
    assert len(naps) == 2 and all(0 <= nap <= 2.0 for nap in naps), naps
