"""The incident end to end: the 32k prefill crashes the original unit, `remediate oom` fixes it, once."""

from __future__ import annotations

import re
import time

import pytest

from tests.support.node import UNIT, UNIT_PATH, Node, poll

pytestmark = pytest.mark.e2e

ALLOC_LINE = "Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
PHASES = ["connect", "lock", "read", "plan", "commit", "wait", "verify"]
CHANGING = ("daemon-reload", "reset-failed", "restart", "start", "stop")


def _load(node: Node, first_seed: int) -> None:
    """Two served ≥1k-token requests: enough fragmentation for the incident (stand-in README)."""
    for seed in (first_seed, first_seed + 1):
        reply = node.generate(2000, seed)
        assert reply.status == 200, reply


def _changing(audit: list[str]) -> list[str]:
    return [line for line in audit if line.split(" ", 1)[0] in CHANGING]


def test_incident_32k_prefill_crashes_then_remediate_fixes_it(incident: Node) -> None:
    node = incident
    original = node.bytes(UNIT_PATH)
    original_mode = node.mode(UNIT_PATH)
    before_id = node.show("InvocationID")["InvocationID"]

    # The incident: after a little load, one 32k-token prefill kills the 0.94 / no-chunking server.
    _load(node, 1)
    crash = node.generate(32768, 3)
    assert crash.status is None, f"the 32k prefill should drop the connection, got {crash}"
    poll(
        lambda: any("torch.OutOfMemoryError: CUDA out of memory" in line for line in node.journal()),
        deadline=10,
        what="the OOM traceback in the journal",
    )
    assert any("SIGQUIT received" in line for line in node.journal())

    started = int(time.time())
    run = node.cli("oom", "--target-tokens", "200000", "--wait-timeout", "60")
    finished = int(time.time()) + 1
    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated", run
    assert result["unit"] == UNIT and result["unit_path"] == UNIT_PATH
    assert result["host"] == node.host.name
    assert result["changed"] is True
    assert result["max_total_num_tokens"] == 195011
    assert result["target_tokens"] == 200000
    assert result["token_gap"] == pytest.approx(-0.025, abs=0.0005)
    assert any("2.5%" in w and "200,000" in w for w in result["warnings"]), result["warnings"]
    assert result["flags"] == {
        "before": {"mem_fraction_static": "0.94", "chunked_prefill_size": None},
        "after": {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"},
    }
    assert result["env"] == {
        "before": {"PYTORCH_CUDA_ALLOC_CONF": None},
        "after": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    }
    assert [p["name"] for p in result["phases"]] == PHASES
    assert all(p["seconds"] >= 0 for p in result["phases"])
    assert "+    --mem-fraction-static 0.93" in result["diff"] and f"+{ALLOC_LINE}" in result["diff"]
    assert result["error"] is None
    assert run.document is not None and run.document["summary"] == {"remediated": 1}

    # The unit on the host: the three values, the alloc conf right after CUDA_HOME, nothing else touched.
    text = node.host.read(UNIT_PATH)
    lines = text.splitlines()
    assert "    --mem-fraction-static 0.93 \\" in lines and "--mem-fraction-static 0.94" not in text
    assert re.search(r"--chunked-prefill-size 4096\b", text)
    cuda = lines.index("Environment=CUDA_HOME=/usr/local/cuda")
    assert lines[cuda + 1] == ALLOC_LINE
    assert text.count("PYTORCH_CUDA_ALLOC_CONF") == 1
    assert node.mode(UNIT_PATH) == original_mode == 0o640

    # The backup: <unit>.bak.oom.<epoch> with the original bytes and mode.
    (backup,) = node.backups(UNIT_PATH)
    assert result["backup"] == backup
    epoch = int(backup.rsplit(".", 1)[1])
    assert started <= epoch <= finished
    assert node.bytes(backup) == original
    assert node.mode(backup) == original_mode

    # The host received daemon-reload, then reset-failed, then restart.
    assert _changing(node.audit()) == ["daemon-reload", f"reset-failed {UNIT}", f"restart {UNIT}"]

    # The running server is the new one, with the new argv and environment.
    show = node.show("ExecStart", "InvocationID", "ActiveState", "NeedDaemonReload")
    assert show["ActiveState"] == "active" and show["NeedDaemonReload"] == "no"
    assert show["InvocationID"] != before_id
    assert "--mem-fraction-static 0.93" in show["ExecStart"] and "--chunked-prefill-size 4096" in show["ExecStart"]
    argv = node.server_argv()
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.93"
    assert argv[argv.index("--chunked-prefill-size") + 1] == "4096"
    assert node.server_env()["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    info = node.server_info()
    assert info["max_total_num_tokens"] == 195011 and info["chunked_prefill_size"] == 4096

    # The same request now succeeds (and the much longer one the fix is sized for).
    seen = len(node.journal())
    _load(node, 11)
    for n_tokens, seed in ((32768, 13), (185_000, 14)):
        reply = node.generate(n_tokens, seed, max_new_tokens=2)
        assert reply.status == 200, reply
        assert reply.json()["meta_info"]["prompt_tokens"] == n_tokens
    assert node.show("InvocationID")["InvocationID"] == show["InvocationID"]
    assert not [line for line in node.journal()[seen:] if "OutOfMemoryError" in line or "SIGQUIT" in line]


def test_second_run_is_unchanged(incident: Node) -> None:
    node = incident
    first = node.cli("oom", "--wait-timeout", "60")
    assert first.returncode == 0 and first.result["outcome"] == "remediated", first
    after_first = node.audit()
    remediated = node.bytes(UNIT_PATH)
    invocation = node.show("InvocationID")["InvocationID"]
    backups = node.backups(UNIT_PATH)
    assert len(backups) == 1

    second = node.cli("oom", "--wait-timeout", "60")
    assert second.returncode == 0, second
    result = second.result
    assert result["outcome"] == "unchanged"
    assert result["changed"] is False and result["backup"] is None and result["diff"] == ""
    assert result["max_total_num_tokens"] == 195011
    assert second.document is not None and second.document["summary"] == {"unchanged": 1}

    assert node.bytes(UNIT_PATH) == remediated
    assert node.backups(UNIT_PATH) == backups
    assert node.show("InvocationID")["InvocationID"] == invocation
    new_audit = node.audit()
    assert new_audit[: len(after_first)] == after_first
    assert new_audit[len(after_first) :], "the second run should at least have read the unit's state"
    assert _changing(new_audit[len(after_first) :]) == []


def test_dry_run_changes_nothing_and_shows_diff_and_steps(incident: Node) -> None:
    node = incident
    original = node.sha(UNIT_PATH)
    invocation = node.show("InvocationID")["InvocationID"]

    human = node.cli("oom", "--dry-run", json_out=False)
    assert human.returncode == 0, human
    assert "-    --mem-fraction-static 0.94 \\" in human.stdout
    assert "+    --mem-fraction-static 0.93 \\" in human.stdout
    assert "would run on the host:" in human.stdout
    for step in ("flock", "token", "only root can change", "copy ", "daemon-reload", "reset-failed", "restart"):
        assert step in human.stdout, step

    as_json = node.cli("oom", "--dry-run")
    assert as_json.returncode == 0, as_json
    result = as_json.result
    assert result["changed"] is True and result["backup"] is None
    assert result["outcome"] not in ("remediated", "failed", "rolled_back")
    assert "+    --mem-fraction-static 0.93 \\" in result["diff"]
    assert any(step.startswith("systemctl restart") for step in result["steps"])

    assert node.sha(UNIT_PATH) == original
    assert node.backups(UNIT_PATH) == []
    assert node.ls("/etc/systemd/system") == [UNIT]
    assert _changing(node.audit()) == []
    assert node.show("InvocationID")["InvocationID"] == invocation


def test_unit_fixed_by_hand_but_never_restarted_is_restarted_not_unchanged(incident: Node) -> None:
    """The file is right and daemon-reloaded, but the running server still has 0.94: that is not done."""
    node = incident
    fixed = node.bytes(UNIT_PATH).decode().replace("--mem-fraction-static 0.94", "--mem-fraction-static 0.93")
    fixed = fixed.replace("--trust-remote-code", "--trust-remote-code --chunked-prefill-size 4096")
    fixed = fixed.replace(
        "Environment=CUDA_HOME=/usr/local/cuda\n", f"Environment=CUDA_HOME=/usr/local/cuda\n{ALLOC_LINE}\n"
    )
    node.host.write(UNIT_PATH, fixed, mode=0o640)
    node.host.systemctl("daemon-reload", check=True)  # by hand (not audited); no restart
    invocation = node.show("InvocationID")["InvocationID"]

    # explicit fraction: without our marker, a step would lower the hand-made 0.93 again (the fraction rule)
    run = node.cli("oom", "--mem-fraction-static", "0.93", "--wait-timeout", "60")

    assert run.returncode == 0, run
    result = run.result
    assert result["changed"] is False and result["backup"] is None
    assert any("server reports mem_fraction_static=0.94" in note for note in result["notes"]), result["notes"]
    assert result["outcome"] == "drift" and result["max_total_num_tokens"] == 195011  # restarted, verified
    assert node.show("InvocationID")["InvocationID"] != invocation
    assert f"restart {UNIT}" in node.audit()
