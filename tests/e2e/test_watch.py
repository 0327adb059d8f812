"""`remediate watch --once` on a sandbox host: a healthy unit is left alone; the 32k prefill's crash is
detected, diagnosed, decided and fixed by the normal `oom` transaction, every step in the audit log; the
request that crashed it then succeeds. With approval mode nothing happens until `approve`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.node import UNIT_PATH, Node, poll
from tests.support.watch import crash_32k as _crash
from tests.support.watch import watch_events as _events
from tests.support.watch import watch_once as _watch

pytestmark = pytest.mark.e2e


def test_watch_once_fixes_the_32k_crash(incident: Node, tmp_path: Path) -> None:
    node, state = incident, tmp_path / "watch-state"
    original = node.bytes(UNIT_PATH)
    quiet = _watch(node, state)
    assert quiet.returncode == 0, quiet
    assert not (state / "watch-audit.jsonl").exists() or _events(state) == [], "a healthy unit: no event"
    assert node.bytes(UNIT_PATH) == original

    _crash(node)
    run = _watch(node, state)
    assert run.returncode == 0, run
    events = _events(state)
    assert [e["event"] for e in events] == ["detected", "diagnosed", "decided", "acted", "outcome"], events
    assert "cuda_oom_runtime" in events[1]["kinds"]  # type: ignore[operator]
    assert events[2]["verdict"] == "act"
    assert events[4]["outcome"] == "remediated", events[4]
    assert node.bytes(UNIT_PATH) != original
    node.wait_healthy()
    assert node.generate(32768, 3).status == 200, "the request that crashed it succeeds after the fix"

    status = node.cli("watch", "--json", "--state-dir", str(state), target="status", ssh_config=False,
                      json_out=False)  # fmt: skip
    doc = json.loads(status.stdout)
    assert doc["breaker"] is None and doc["incidents"][0]["outcome"] == "remediated"
    assert doc["hosts"] == {node.host.name: "cooling_down"}


def test_approval_mode_waits_for_approve(incident: Node, tmp_path: Path) -> None:
    node, state = incident, tmp_path / "watch-state"
    policy = tmp_path / "policy.yaml"
    policy.write_text("approval: true\n")
    original = node.bytes(UNIT_PATH)
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    _crash(node)
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    assert node.bytes(UNIT_PATH) == original, "nothing happens before approve"
    events = _events(state)
    assert events[-1]["verdict"] == "wait_approval"
    incident_id = str(events[-1]["incident"])
    approve = node.cli("watch", incident_id, "--state-dir", str(state), target="approve",
                       ssh_config=False, json_out=False)  # fmt: skip
    assert approve.returncode == 0, approve
    run = _watch(node, state, "--policy", str(policy))
    assert run.returncode == 0, run
    outcome = _events(state)[-1]
    assert outcome["event"] == "outcome" and outcome["outcome"] == "remediated", outcome
    assert node.bytes(UNIT_PATH) != original


def test_deny_drops_the_action(incident: Node, tmp_path: Path) -> None:
    node, state = incident, tmp_path / "watch-state"
    policy = tmp_path / "policy.yaml"
    policy.write_text("approval: true\n")
    original = node.bytes(UNIT_PATH)
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    _crash(node)
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    incident_id = str(_events(state)[-1]["incident"])
    deny = node.cli("watch", incident_id, "--state-dir", str(state), target="deny", ssh_config=False, json_out=False)
    assert deny.returncode == 0, deny
    assert _watch(node, state, "--policy", str(policy)).returncode == 0
    outcome = _events(state)[-1]
    assert outcome["event"] == "outcome" and outcome["outcome"] == "denied", outcome
    assert node.bytes(UNIT_PATH) == original, "a denied fix is never made"
    again = node.cli(
        "watch", incident_id, "--state-dir", str(state), target="approve", ssh_config=False, json_out=False
    )
    assert again.returncode == 2 and "no pending approval" in again.stderr, again


def test_startup_not_enough_memory_is_reported_not_fixed(node: Node, tmp_path: Path) -> None:
    from sandbox.units import incident_unit

    state = tmp_path / "watch-state"
    text = incident_unit(node.host.address, node.port).replace(
        "--mem-fraction-static 0.94", "--mem-fraction-static 0.75"
    )
    node.install(text, start=False)
    original = node.bytes(UNIT_PATH)
    assert _watch(node, state).returncode == 0  # the cursor, before the start
    assert node.host.systemctl("start", "sglang.service").returncode == 0
    poll(lambda: any("Not enough memory" in line for line in node.journal()), deadline=20, what="the startup failure")
    poll(lambda: any("Main process exited" in line for line in node.journal()), deadline=20, what="the exit")
    assert _watch(node, state).returncode == 0
    events = _events(state)
    diagnosed = next(e for e in events if e["event"] == "diagnosed")
    assert "kv_pool_too_small_at_startup" in diagnosed["kinds"]  # type: ignore[operator]
    decided = next(e for e in events if e["event"] == "decided")
    assert decided["verdict"] == "report", decided
    assert not [e for e in events if e["event"] == "acted"]
    assert node.bytes(UNIT_PATH) == original
