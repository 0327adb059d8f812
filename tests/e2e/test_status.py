"""`remediate status`: read-only, and tells a remediated host from one that is not."""

from __future__ import annotations

import pytest

from tests.support.node import UNIT, UNIT_PATH, Node

pytestmark = pytest.mark.e2e


def test_status_before_and_after_remediation(incident: Node) -> None:
    node = incident
    sha = node.sha(UNIT_PATH)

    before = node.cli("status")
    assert before.returncode == 0, before
    result = before.result
    assert result["unit"] == UNIT and result["remediated"] is False
    assert result["active_state"] == "active"
    assert result["flags"]["before"] == {"mem_fraction_static": "0.94", "chunked_prefill_size": None}
    assert result["max_total_num_tokens"] == 209007
    assert node.sha(UNIT_PATH) == sha and node.backups(UNIT_PATH) == []
    assert [line for line in node.audit() if not line.startswith("show ")] == []

    assert node.cli("oom", "--wait-timeout", "60").returncode == 0

    after = node.cli("status")
    assert after.returncode == 0, after
    result = after.result
    assert result["remediated"] is True
    assert result["flags"]["before"] == {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"}
    assert result["env"]["before"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert result["max_total_num_tokens"] == 195011
    assert result["need_daemon_reload"] is False


def test_status_human_table(incident: Node) -> None:
    run = incident.cli("status", json_out=False)
    assert run.returncode == 0, run
    assert UNIT in run.stdout and "0.94" in run.stdout and "no" in run.stdout
