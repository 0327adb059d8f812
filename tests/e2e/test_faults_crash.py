"""The fault matrix (issue 13), the crash cells: a new server that is healthy and then dies under ``--probe``,
and crash loops that end in systemd's ``start-limit-hit`` — before remediate arrives, or caused by the new
unit during the wait. Real systemd 252 in nspawn, real sshd, the sglang stand-in; each cell asserts the
promise (old or new bytes, a complete backup, no temp file), the exit code and the message.
"""

from __future__ import annotations

import pytest

from .conftest import UNIT, UNIT_PATH, Node
from .test_faults import changing, promise

pytestmark = pytest.mark.e2e

OLD_TOKENS = 209007  # the incident's 0.94
NEW_TOKENS = 195011  # the recipe's 0.93


def _one_host_once(error: str, node: Node) -> None:
    """The message names its host once and carries none of the script's framing."""
    assert "\n" not in error and error.count(f"{node.host.name}: ") == 1, error
    assert "@@" not in error and "exit: -1" not in error and "::" not in error, error


# -- healthy, then crashes under --probe ----------------------------------------------------------------


def test_healthy_then_crashes_under_the_probe_rolls_back_to_the_old_server(incident: Node) -> None:
    """0.95 without chunking starts (the pool is bigger) and answers /health, but leaves 0.08 GB for a 32k
    prefill's 896 MiB activation spike: the probe's request kills it, and the run puts the old unit back."""
    node = incident
    original = node.bytes(UNIT_PATH)
    run = node.cli(
        "oom",
        "--mem-fraction-static",
        "0.95",
        "--chunked-prefill-size",
        "-1",
        "--probe",
        "32768",
        "--wait-timeout",
        "60",
    )

    assert run.returncode == 1, run
    result = run.result
    assert result["outcome"] == "rolled_back", run
    error = result["error"]
    assert "the probe prefill of 32,768 tokens failed" in error and "rolled back" in error, error
    _one_host_once(error, node)
    phases = [p["name"] for p in result["phases"]]
    assert phases.index("wait") < phases.index("probe") < phases.index("rollback"), phases  # healthy first
    assert any("torch.OutOfMemoryError" in line for line in result["journal"]), result["journal"]
    # the promise: the old bytes, one complete backup of them, no temp file
    promise(node, original, changed=False)
    (backup,) = node.backups(UNIT_PATH)
    assert result["backup"] == backup and node.bytes(backup) == original
    # the old server runs again: the commit's restart, then the undo's
    assert changing(node).count(f"restart {UNIT}") == 2
    node.wait_healthy()
    info = node.server_info()
    assert info["mem_fraction_static"] == 0.94 and info["max_total_num_tokens"] == OLD_TOKENS
    assert node.show("ActiveState")["ActiveState"] == "active"
