"""The fault matrix (issue 13): the transaction on a real sandbox host under each fault, end to end.

Every cell asserts the promise: the unit is the old bytes or the new bytes (never anything else), a
complete backup of the original exists whenever the unit changed, no temp file is left, and the exit
code and message say what happened. Faults are real: the SSH connection is cut by SIGKILLing the sshd
processes that serve it (from a one-shot shim on the host's PATH at the exact step, so the moment is
deterministic), the controller is SIGKILLed while a step is paused, the unit directory is a full tmpfs or
a read-only bind mount inside the host, and systemctl steps fail through the same shim. docs/internals/RELIABILITY.md
maps each fault to its cell here.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from remediate.host.common.options import RunOptions
from remediate.host.oom import runner
from remediate.models import CommandResult
from remediate.transport.base import SSHOptions
from remediate.transport.ssh import SSHTransport
from tests.support.faults import CUT as _CUT
from tests.support.faults import FAIL as _FAIL
from tests.support.faults import (
    FIRED,
    GO,
    REACHED,
    UNIT_DIR,
    changing,
    cut_connections,
    install_shim,
    promise,
    sshd_sessions,
)
from tests.support.faults import PAUSE as _PAUSE
from tests.support.faults import clear_markers as _clear_markers
from tests.support.node import FAST_KNOBS, UNIT, UNIT_PATH, Node, poll

pytestmark = pytest.mark.e2e


def _server_starts(node: Node) -> int:
    return sum(1 for line in node.journal() if "server_args=ServerArgs(" in line)


@pytest.fixture
def host(incident: Node) -> Iterator[Node]:
    _clear_markers(incident)
    yield incident
    _clear_markers(incident)
    for tool in ("systemctl", "mktemp", "cp"):
        path = incident.host.path(f"/usr/local/sbin/{tool}")
        if path.exists():
            path.unlink()


def rerun_is_safe(node: Node) -> None:
    """Re-running is safe: the next run ends remediated (or finds it so), exit 0, the unit new."""
    again = node.cli("oom", "--wait-timeout", "60")
    assert again.returncode == 0, again
    assert again.result["outcome"] in ("remediated", "unchanged"), again
    assert again.result["max_total_num_tokens"] == 195011


# -- the connection cut at each step of the commit -----------------------------------------------------

CUT_AT = {
    # (tool, argument glob): the shim fires on that call, before it runs
    "after-the-backup": ("mktemp", "*/.remediate.XXXXXX"),  # backup done, nothing staged or renamed
    "after-the-write": ("systemctl", "daemon-reload"),  # the unit renamed into place, not yet reloaded
    "after-daemon-reload": ("systemctl", "reset-failed*"),
    "during-the-restart": ("systemctl", "restart*"),
}


@pytest.mark.parametrize("step", CUT_AT, ids=CUT_AT)
def test_connection_cut_during_the_commit_reconnects_reads_the_host_and_finishes(host: Node, step: str) -> None:
    node = host
    original = node.bytes(UNIT_PATH)
    tool, match = CUT_AT[step]
    install_shim(node, tool, match, _CUT)

    run = node.cli("oom", "--wait-timeout", "60")

    assert node.host.path(FIRED).exists(), "the cut never happened"
    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated", run
    assert result["max_total_num_tokens"] == 195011
    promise(node, original, changed=True)
    (backup,) = node.backups(UNIT_PATH)
    assert result["backup"] == backup
    assert changing(node).count(f"restart {UNIT}") == 1, "the commit ran once, not twice"


def test_connection_cut_during_the_wait_reconnects_and_finishes(host: Node) -> None:
    node = host
    original = node.bytes(UNIT_PATH)
    node.host.set_standin(time_scale=0.01)  # a 4.5 s load: the cut lands while the server loads
    proc = node.popen("oom", "--wait-timeout", "60")
    poll(lambda: f"restart {UNIT}" in node.audit(), deadline=30, what="the restart")
    poll(lambda: cut_connections(node), deadline=10, what="an SSH session to cut")
    run = node.finish(proc)

    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert run.result["max_total_num_tokens"] == 195011
    promise(node, original, changed=True)
    assert changing(node).count(f"restart {UNIT}") == 1


class _CutsBeforeCommit:
    """A real SSH transport whose connection is cut (sshd killed on the host) right after the read."""

    def __init__(self, inner: SSHTransport, node: Node) -> None:
        self.inner = inner
        self.host = inner.host
        self.node = node
        self.cut = 0

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> CommandResult:
        if stdin is not None and stdin.startswith("# remediate commit") and not self.cut:
            self.cut = cut_connections(self.node)
            poll(lambda: not sshd_sessions(self.node), deadline=10, what="the cut connection to close")
        return self.inner.run(command, stdin=stdin, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_connection_cut_after_the_read_reconnects_and_commits_once(host: Node) -> None:
    node = host
    original = node.bytes(UNIT_PATH)
    ssh = SSHTransport(node.host.name, SSHOptions(ssh_config=str(node.fleet.ssh_config)))
    transport = _CutsBeforeCommit(ssh, node)
    try:
        result = runner.remediate_host(transport, RunOptions(timeout=60))  # type: ignore[arg-type]
    finally:
        ssh.close()
    assert transport.cut, "the cut never happened"
    assert result.outcome == "remediated", result.error
    promise(node, original, changed=True)
    assert changing(node).count(f"restart {UNIT}") == 1


# -- systemd steps that fail ----------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["daemon-reload", "restart*"], ids=["daemon-reload-fails", "restart-fails"])
def test_a_failing_systemd_step_after_the_write_rolls_back_to_the_old_bytes(host: Node, step: str) -> None:
    node = host
    original = node.bytes(UNIT_PATH)
    install_shim(node, "systemctl", step, _FAIL.format(tool="systemctl"))

    run = node.cli("oom", "--wait-timeout", "30")

    assert run.returncode == 1, run
    result = run.result
    assert result["outcome"] == "rolled_back", run
    error = result["error"]
    assert "injected failure" in error and "now holds the new bytes" in error and "rolled back" in error, error
    assert error.count(f"{node.host.name}: ") == 1 and "exit: -1" not in error and "::" not in error, error
    promise(node, original, changed=False)
    (backup,) = node.backups(UNIT_PATH)
    assert node.bytes(backup) == original
    assert node.healthy() and node.server_info()["max_total_num_tokens"] == 209007


# -- the unit directory: full, read-only ---------------------------------------------------------------


@pytest.fixture
def mounted(host: Node) -> Iterator[Node]:
    """The test mounts something over the unit directory inside the host; it is unmounted afterwards."""
    yield host
    host.host.run("/bin/umount", UNIT_DIR)


def test_full_disk_writes_nothing_leaves_no_partial_backup_and_runs_no_undo(mounted: Node) -> None:
    node = mounted
    original = node.bytes(UNIT_PATH)
    # mode=0755: a tmpfs is 1777 by default, and the commit refuses a unit directory anyone can write.
    mount = (
        f"set -e; cp -p {UNIT_PATH} /tmp/unit; mount -t tmpfs -o size=16k,mode=0755 tmpfs {UNIT_DIR}; "
        f"cp -p /tmp/unit {UNIT_PATH}; dd if=/dev/zero of={UNIT_DIR}/filler bs=512 2>/dev/null || true"
    )
    done = node.host.sh(mount)
    assert done.returncode == 0, done.stderr
    inside = node.host.run("/bin/cat", UNIT_PATH).stdout.encode()
    assert inside == original

    run = node.cli("oom", "--wait-timeout", "30")

    assert run.returncode == 1, run
    result = run.result
    error = result["error"]
    assert result["outcome"] == "failed" and "No space left on device" in error, error
    assert "nothing was written" in error and "rollback" not in error, error
    assert "rollback" not in [p["name"] for p in result.get("phases", [])]
    listing = node.host.sh(f"ls -A {UNIT_DIR}").stdout.split()
    assert sorted(listing) == sorted([UNIT, "filler"]), f"no partial backup, no temp file: {listing}"
    assert node.host.run("/bin/cat", UNIT_PATH).stdout.encode() == original
    assert changing(node) == []


def test_read_only_unit_directory_writes_nothing_and_runs_no_undo(mounted: Node) -> None:
    node = mounted
    original = node.bytes(UNIT_PATH)
    done = node.host.sh(f"mount --bind {UNIT_DIR} {UNIT_DIR} && mount -o remount,bind,ro {UNIT_DIR}")
    assert done.returncode == 0, done.stderr

    run = node.cli("oom", "--wait-timeout", "30")

    assert run.returncode == 1, run
    error = run.result["error"]
    assert run.result["outcome"] == "failed" and "Read-only file system" in error, error
    assert "nothing was written" in error and "rollback failed" not in error, error
    assert "rollback" not in [p["name"] for p in run.result.get("phases", [])]
    assert node.bytes(UNIT_PATH) == original and node.backups(UNIT_PATH) == []
    assert changing(node) == []


# -- the controller SIGKILLed at each step -------------------------------------------------------------

KILL_AT = {
    "during-the-read": ("systemctl", "show *-p *DropInPaths*"),
    "after-the-backup": ("mktemp", "*/.remediate.XXXXXX"),
    "after-the-write": ("systemctl", "daemon-reload"),
    "during-the-restart": ("systemctl", "restart*"),
}


@pytest.mark.parametrize("step", KILL_AT, ids=KILL_AT)
def test_controller_killed_at_a_step_leaves_old_or_new_bytes_and_a_rerun_finishes(host: Node, step: str) -> None:
    node = host
    original = node.bytes(UNIT_PATH)
    tool, match = KILL_AT[step]
    install_shim(node, tool, match, _PAUSE)
    proc = node.popen("oom", "--wait-timeout", "60")
    poll(lambda: node.host.path(REACHED).exists(), deadline=30, what=f"the run to reach {step}")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    node.host.write(GO, "")  # the step on the host goes on without its controller

    # The commit script (if it started) finishes on its own, under the lock; a re-run waits for it.
    rerun_is_safe(node)
    promise(node, original, changed=True)
    assert len(node.backups(UNIT_PATH)) == 1


def test_controller_killed_during_the_wait_leaves_the_new_unit_and_a_rerun_finds_it(host: Node) -> None:
    node = host
    original = node.bytes(UNIT_PATH)
    node.host.set_standin(time_scale=0.01)
    proc = node.popen("oom", "--wait-timeout", "60")
    poll(lambda: f"restart {UNIT}" in node.audit(), deadline=30, what="the restart")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    rerun_is_safe(node)
    promise(node, original, changed=True)
    assert changing(node).count(f"restart {UNIT}") == 1, "the re-run found the loading server, did not restart it"


# -- races --------------------------------------------------------------------------------------------


def test_rollback_racing_an_oom_waits_for_it_then_restores_the_original(host: Node) -> None:
    node = host
    original = node.bytes(UNIT_PATH)
    starts = _server_starts(node)
    node.host.set_standin(time_scale=0.01)  # the oom's server loads 4.5 s: the rollback arrives meanwhile
    oom = node.popen("oom", "--wait-timeout", "60")
    poll(lambda: f"restart {UNIT}" in node.audit(), deadline=30, what="the oom's restart")
    rollback = node.popen("rollback", "--wait-timeout", "60")
    # once the oom's server has read its knobs (they are read at start), the rollback's may load fast
    poll(lambda: _server_starts(node) > starts, deadline=30, what="the oom's server to start")
    node.host.set_standin(**FAST_KNOBS)
    first, second = node.finish(oom), node.finish(rollback)

    assert first.returncode == 0 and first.result["outcome"] == "remediated", first
    assert second.returncode == 0 and second.result["outcome"] == "restored", second
    assert node.bytes(UNIT_PATH) == original
    promise(node, original, changed=False)
    assert changing(node).count(f"restart {UNIT}") == 2  # one each, in turn
    assert node.server_info()["max_total_num_tokens"] == 209007


# -- bad input and hosts that refuse ------------------------------------------------------------------


def test_a_unit_name_outside_systemds_grammar_is_bad_input_and_nothing_is_contacted(host: Node) -> None:
    node = host
    original = node.bytes(UNIT_PATH)
    run = node.cli("oom", "--unit", "a/../../x")
    assert run.returncode == 2, run
    assert "not a valid systemd unit name" in (run.stdout + run.stderr)
    assert node.audit() == [] and node.bytes(UNIT_PATH) == original


def test_detection_ignores_sglang_in_descriptions_and_comments(host: Node) -> None:
    node = host
    node.host.write(
        f"{UNIT_DIR}/notes.service",
        "# replaced by: python -m sglang.launch_server (see sglang.service)\n"
        "[Unit]\nDescription=Notes about sglang.launch_server\n\n[Service]\nExecStart=/bin/sleep infinity\n",
    )
    node.host.systemctl("daemon-reload", check=True)
    run = node.cli("oom", "--dry-run")
    assert run.returncode == 0, run
    assert run.result["unit"] == UNIT


def test_known_hosts_with_a_cert_authority_line_still_verifies_the_host(host: Node) -> None:
    node = host
    known = node.tmp_path / "known_hosts"
    pub = node.host.host_key.with_suffix(".pub").read_text().split()
    known.write_text(
        "@cert-authority *.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHJlbWVkaWF0ZS1jYS1rZXktZm9yLXRlc3RzISE=\n"
        f"{node.host.address} {pub[0]} {pub[1]}\n"
    )
    run = node.cli("oom", "--known-hosts", str(known), "--dry-run")
    assert run.returncode == 0, run
    assert "Traceback" not in run.stderr


def test_a_revoked_host_key_is_refused(host: Node) -> None:
    node = host
    known = node.tmp_path / "known_hosts"
    pub = node.host.host_key.with_suffix(".pub").read_text().split()
    known.write_text(f"@revoked * {pub[0]} {pub[1]}\n{node.host.address} {pub[0]} {pub[1]}\n")
    run = node.cli("oom", "--known-hosts", str(known), "--accept-new-host-key")
    assert run.returncode == 3, run
    assert "revoked" in run.result["error"] and "Traceback" not in run.stderr
    assert node.audit() == []
