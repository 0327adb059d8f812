"""Connection safety: host keys are verified before anything is sent; sudo works or fails clearly."""

from __future__ import annotations

import pytest

from tests.support.node import UNIT_PATH, Node

pytestmark = pytest.mark.e2e

LOCK_DIR = "/run/remediate"  # host/common/lock.py LOCK_DIR: the lock, the commit lock and commit logs live here


def _untouched(node: Node, sha: str) -> None:
    """Nothing beyond the SSH handshake reached the host: no systemctl at all, no lock, same bytes."""
    assert node.audit() == []
    assert node.ls(LOCK_DIR) == [], "no lock taken, no commit log"
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
    entries = node.host.audit_entries()
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


def test_accept_new_host_key_records_an_unknown_key_then_verifies_it(incident: Node) -> None:
    node = incident
    known = node.tmp_path / "known_hosts"
    known.write_text("")

    run = node.cli("oom", "--known-hosts", str(known), "--accept-new-host-key", "--dry-run")

    assert run.returncode == 0, run
    recorded = known.read_text().split()
    assert recorded[0] == node.host.address
    assert " ".join(recorded[1:3]) == " ".join(node.host.host_key.with_suffix(".pub").read_text().split()[:2])
    # the recorded key is now pinned: a second run verifies against it without --accept-new-host-key
    again = node.cli("oom", "--known-hosts", str(known), "--dry-run")
    assert again.returncode == 0, again
    assert known.read_text().count("\n") == 1


def test_proxyjump_from_ssh_config(incident: Node) -> None:
    """A target reached through a bastion (ssh_config ProxyJump): host keys verified on both hops."""
    node = incident
    bastion = next(h for h in node.fleet.hosts if h is not node.host)
    config = node.tmp_path / "ssh_config"
    config.write_text(
        f"Host bastion\n  HostName {bastion.address}\n  User root\n"
        f"  IdentityFile {node.fleet.identity}\n  UserKnownHostsFile {node.fleet.known_hosts}\n"
        f"Host behind\n  HostName {node.host.address}\n  User root\n  ProxyJump bastion\n"
        f"  IdentityFile {node.fleet.identity}\n  UserKnownHostsFile {node.fleet.known_hosts}\n"
    )

    before = bastion.audit()  # the bastion is not reset for this test: an earlier test's calls may be there
    run = node.cli("oom", "--ssh-config", str(config), target="behind", ssh_config=False)

    assert run.returncode == 0, run
    assert run.result["host"] == "behind" and run.result["outcome"] == "remediated"
    assert run.result["max_total_num_tokens"] == 195011
    assert bastion.audit() == before  # the bastion only forwarded the connection
    assert "restart sglang.service" in node.audit()
