"""Backups and rollback end to end on a sandbox host (#5): list, restore, roll back a rollback, prune."""

from __future__ import annotations

import pytest

from sandbox import SandboxHost
from tests.support.node import UNIT, UNIT_PATH, Node, sha256_text

pytestmark = pytest.mark.e2e

HAND_MADE = f"{UNIT_PATH}.bak.oom.1764400000"  # what `cp $P $P.bak.oom.$(date +%s)` left during the incident


@pytest.fixture
def host(incident: Node) -> SandboxHost:
    """The sandbox host that ``incident`` runs the incident's unit on."""
    return incident.host


def remediate(node: Node, *args: str) -> tuple[int, dict]:
    run = node.cli(*args)
    assert run.document is not None, run
    return run.returncode, run.document


def running_fraction(host: SandboxHost) -> str:
    argv = host.show(UNIT, "ExecStart")["ExecStart"]
    return argv.split("--mem-fraction-static ", 1)[1].split()[0]


def test_oom_then_rollback_restores_the_original_bytes_and_server(incident: Node, host: SandboxHost) -> None:
    original = host.read(UNIT_PATH)
    code, doc = remediate(incident, "oom")
    assert code == 0 and doc["results"][0]["outcome"] == "remediated", doc["results"][0]
    assert running_fraction(host) == "0.93"

    code, doc = remediate(incident, "rollback")
    [result] = doc["results"]
    assert code == 0, result
    assert result["outcome"] == "restored"
    assert result["max_total_num_tokens"] == 209007  # 0.94's pool again
    assert sha256_text(host.read(UNIT_PATH)) == sha256_text(original)
    assert running_fraction(host) == "0.94"
    assert result["backup"].startswith(f"{UNIT_PATH}.bak.rollback.")
    changing = [c for c in host.audit() if c.split(" ", 1)[0] in ("daemon-reload", "reset-failed", "restart", "start")]
    assert changing == ["daemon-reload", f"reset-failed {UNIT}", f"restart {UNIT}"] * 2, changing  # oom, rollback

    # …and the rollback itself can be rolled back: --to the .bak.rollback file brings the fix back
    code, doc = remediate(incident, "rollback", "--to", result["backup"])
    assert code == 0 and doc["results"][0]["outcome"] == "restored"
    assert "--mem-fraction-static 0.93" in host.read(UNIT_PATH)
    assert running_fraction(host) == "0.93"


def test_hand_made_backups_are_listed_and_restorable_with_to(incident: Node, host: SandboxHost) -> None:
    original = host.read(UNIT_PATH)
    older = original.replace("--mem-fraction-static 0.94", "--mem-fraction-static 0.90")
    host.write(HAND_MADE, older)
    code, doc = remediate(incident, "oom")
    assert code == 0
    ours = doc["results"][0]["backup"]

    code, doc = remediate(incident, "backups")
    assert code == 0
    rows = doc["results"][0]["backups"]
    assert [r["path"] for r in rows] == [ours, HAND_MADE]  # newest first; the hand-made one dates from its name
    assert rows[1]["time"] == 1764400000 and rows[1]["time_source"] == "name"
    assert "mem-fraction-static 0.93 → 0.90" in rows[1]["changes"]

    code, doc = remediate(incident, "rollback", "--to", HAND_MADE)
    assert code == 0 and doc["results"][0]["outcome"] == "restored"
    assert host.read(UNIT_PATH) == older
    assert running_fraction(host) == "0.90"


def test_invalid_backup_is_refused_and_nothing_changes(incident: Node, host: SandboxHost) -> None:
    before = host.read(UNIT_PATH)
    invocation = host.show(UNIT, "InvocationID")["InvocationID"]
    host.write(f"{UNIT_PATH}.bak.oom.1764400001", "[Service]\nExecStart=/usr/bin/sleep infinity\n")
    code, doc = remediate(incident, "rollback", "--to", f"{UNIT_PATH}.bak.oom.1764400001")
    assert code == 2
    assert "would not run sglang" in doc["results"][0]["error"]
    code, doc = remediate(incident, "rollback", "--to", "/etc/passwd")
    assert code == 2 and "is not a backup of this unit" in doc["results"][0]["error"]
    assert host.read(UNIT_PATH) == before
    assert host.show(UNIT, "InvocationID")["InvocationID"] == invocation
    assert not any(cmd.startswith(("restart", "daemon-reload")) for cmd in host.audit())


def test_prune_keeps_exactly_n_and_the_protected_ones(incident: Node, host: SandboxHost) -> None:
    current = host.read(UNIT_PATH)
    # five old backups with distinct bytes, plus one (the oldest) identical to the current unit
    for i in range(5):
        host.write(f"{UNIT_PATH}.bak.oom.{1764400100 + i}", current.replace("0.94", f"0.8{i}"))
    host.write(f"{UNIT_PATH}.bak.oom.1764400000", current)
    code, doc = remediate(incident, "backups", "--prune", "--keep", "2", "--dry-run")
    assert code == 0
    would = doc["results"][0]["would_delete"]
    assert would == [f"{UNIT_PATH}.bak.oom.{1764400100 + i}" for i in (2, 1, 0)]
    assert len(host.run("sh", "-c", f"ls {UNIT_PATH}.bak*").stdout.split()) == 6  # dry run deleted nothing

    code, doc = remediate(incident, "backups", "--prune", "--keep", "2")
    assert code == 0 and sorted(doc["results"][0]["deleted"]) == sorted(would), doc["results"][0].get("error")
    left = sorted(host.run("sh", "-c", f"ls {UNIT_PATH}.bak*").stdout.split())
    assert left == sorted(
        [f"{UNIT_PATH}.bak.oom.1764400104", f"{UNIT_PATH}.bak.oom.1764400103", f"{UNIT_PATH}.bak.oom.1764400000"]
    )
