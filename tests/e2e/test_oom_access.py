"""Connection safety: host keys are verified before anything is sent; sudo works or fails clearly."""

from __future__ import annotations

import json

import pytest

from .conftest import UNIT, UNIT_PATH, Node

pytestmark = pytest.mark.e2e

LOCK = f"/run/lock/remediate-{UNIT}.lock"


def _untouched(node: Node, sha: str) -> None:
    """Nothing beyond the SSH handshake reached the host: no systemctl at all, no lock, same bytes."""
    assert node.audit() == []
    assert not node.host.path(LOCK).exists()
    assert node.sha(UNIT_PATH) == sha
    assert node.backups(UNIT_PATH) == []


def _one_line_error(node: Node, *args: str, target: str, expect: str) -> None:
    """The human output: one clear line naming the problem, exit 3, no traceback."""
    run = node.cli("oom", *args, target=target, ssh_config=False, json_out=False)
    assert run.returncode == 3, run
    assert "Traceback" not in run.stdout + run.stderr
    lines = [line for line in (run.stdout + run.stderr).splitlines() if expect in line]
    assert len(lines) == 1, run


def test_unknown_host_key_exits_3_and_sends_nothing(incident: Node) -> None:
    node = incident
    sha = node.sha(UNIT_PATH)
    empty = node.tmp_path / "known_hosts"
    empty.write_text("")

    run = node.cli("oom", "--known-hosts", str(empty))

    assert run.returncode == 3, run
    result = run.result
    assert result["outcome"] == "unreachable"
    assert "unknown host key" in result["error"]
    assert result["phases"] == [] or [p["name"] for p in result["phases"]] == ["connect"]
    _untouched(node, sha)
    assert empty.read_text() == "", "an unknown key is never recorded without --accept-new-host-key"


def test_changed_host_key_exits_3_and_sends_nothing(incident: Node) -> None:
    node = incident
    sha = node.sha(UNIT_PATH)
    other = next(h for h in node.fleet.hosts if h is not node.host)
    wrong_key = " ".join(other.host_key.with_suffix(".pub").read_text().split()[:2])
    known = node.tmp_path / "known_hosts"
    known.write_text(f"{node.host.address} {wrong_key}\n")

    run = node.cli("oom", "--known-hosts", str(known), "--accept-new-host-key")

    assert run.returncode == 3, run
    assert run.result["outcome"] == "unreachable"
    assert "host key mismatch" in run.result["error"]
    _untouched(node, sha)
    assert known.read_text() == f"{node.host.address} {wrong_key}\n"


def test_sudo_user_remediates(incident: Node) -> None:
    node = incident
    fleet = node.fleet
    run = node.cli(
        "oom",
        "--sudo",
        "--identity",
        str(fleet.identity),
        "--known-hosts",
        str(fleet.known_hosts),
        target=f"deploy@{node.host.address}",
        ssh_config=False,
    )
    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated" and run.result["max_total_num_tokens"] == 195011
    assert run.result["host"] == f"deploy@{node.host.address}"
    assert "--mem-fraction-static 0.93" in node.host.read(UNIT_PATH)
    entries = [json.loads(line) for line in node.host.read("/var/log/systemctl-audit.log").splitlines()]
    assert entries and all(e["uid"] == 0 and e["user"] == "deploy" for e in entries), entries
    (backup,) = node.backups(UNIT_PATH)
    assert node.host.path(backup).stat().st_uid == 0


def test_password_sudo_user_gets_a_clear_error(incident: Node) -> None:
    node = incident
    sha = node.sha(UNIT_PATH)
    fleet = node.fleet
    args = ("--sudo", "--identity", str(fleet.identity), "--known-hosts", str(fleet.known_hosts))
    target = f"ops@{node.host.address}"

    run = node.cli("oom", *args, target=target, ssh_config=False)
    assert run.returncode == 3, run
    error = run.result["error"]
    assert run.result["outcome"] == "unreachable"
    assert "needs a password" in error and "sudo -n" in error and "\n" not in error, error
    _one_line_error(node, *args, target=target, expect="needs a password")
    _untouched(node, sha)
