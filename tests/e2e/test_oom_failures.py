"""When things go wrong: a server that never gets healthy, concurrent runs, an edit racing the commit."""

from __future__ import annotations

from typing import Any

import pytest

from remediate.host.common.options import RunOptions
from remediate.host.oom import runner
from remediate.models import CommandResult
from remediate.transport.base import SSHOptions
from remediate.transport.ssh import SSHTransport
from tests.support.node import FAST_KNOBS, UNIT, UNIT_PATH, Node, poll

pytestmark = pytest.mark.e2e

CHANGING = ("daemon-reload", "reset-failed", "restart", "start", "stop")


def _changing(audit: list[str]) -> list[str]:
    return [line for line in audit if line.split(" ", 1)[0] in CHANGING]


def _server_starts(node: Node) -> int:
    return sum(1 for line in node.journal() if "server_args=ServerArgs(" in line)


def test_never_healthy_server_is_rolled_back_and_the_old_one_runs_again(incident: Node) -> None:
    node = incident
    original = node.bytes(UNIT_PATH)
    starts = _server_starts(node)
    node.host.set_standin(**FAST_KNOBS, failure="never_healthy")

    proc = node.popen("oom", "--wait-timeout", "8")
    # The knobs are read when a server starts: once the new server has read "never_healthy", the next
    # start (the rollback's) must be healthy again.
    poll(lambda: _server_starts(node) > starts, deadline=30, what="the remediated server to start")
    failing_id = node.show("InvocationID")["InvocationID"]
    node.host.set_standin(**FAST_KNOBS)
    run = node.finish(proc)

    assert run.returncode == 1, run
    result = run.result
    assert result["outcome"] == "rolled_back"
    assert "not healthy after 8s" in result["error"] and "rolled back" in result["error"], result["error"]
    assert run.document is not None and run.document["summary"] == {"rolled_back": 1}

    assert node.bytes(UNIT_PATH) == original, "the original bytes are restored"
    (backup,) = node.backups(UNIT_PATH)
    assert node.bytes(backup) == original
    assert _changing(node.audit()) == ["daemon-reload", f"reset-failed {UNIT}", f"restart {UNIT}"] * 2

    # The old server (0.94, no chunking, no alloc conf) runs again, as a new invocation, and is healthy.
    show = node.show("ActiveState", "InvocationID", "ExecStart", "NeedDaemonReload")
    assert show["ActiveState"] == "active" and show["NeedDaemonReload"] == "no"
    assert show["InvocationID"] != failing_id
    assert "--mem-fraction-static 0.94" in show["ExecStart"]
    assert node.healthy()
    assert node.server_info()["max_total_num_tokens"] == 209007
    argv = node.server_argv()
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.94" and "--chunked-prefill-size" not in argv
    assert "PYTORCH_CUDA_ALLOC_CONF" not in node.server_env()
    assert result["max_total_num_tokens"] == 209007


def test_never_healthy_with_no_rollback_fails_and_keeps_the_new_unit(incident: Node) -> None:
    node = incident
    original = node.bytes(UNIT_PATH)
    node.host.set_standin(**FAST_KNOBS, failure="never_healthy")

    run = node.cli("oom", "--wait-timeout", "5", "--no-rollback")

    assert run.returncode == 1, run
    result = run.result
    assert result["outcome"] == "failed"
    assert "not healthy after 5s" in result["error"]
    text = node.host.read(UNIT_PATH)
    assert "--mem-fraction-static 0.93" in text and "--chunked-prefill-size 4096" in text
    (backup,) = node.backups(UNIT_PATH)
    assert node.bytes(backup) == original and result["backup"] == backup
    assert _changing(node.audit()) == ["daemon-reload", f"reset-failed {UNIT}", f"restart {UNIT}"]
    assert "--mem-fraction-static 0.93" in node.show("ExecStart")["ExecStart"]
    assert node.http("GET", "/health").status == 503


def test_two_concurrent_runs_one_wins_the_other_fails_clearly_and_the_file_is_never_torn(incident: Node) -> None:
    node = incident
    original = node.bytes(UNIT_PATH)
    first = node.popen("oom", "--wait-timeout", "60")
    second = node.popen("oom", "--wait-timeout", "60")
    runs = [node.finish(first), node.finish(second)]
    # No sampling (a poll sees a state only if it lands in it): the host's own records say what was written.
    # One commit wrote: one backup (the original bytes), one daemon-reload in the host's audit log of systemctl
    # calls (every commit that renames reloads), and the file is the new bytes: one atomic rename, never torn.
    assert _changing(node.audit()).count("daemon-reload") == 1, node.audit()
    (backup,) = node.backups(UNIT_PATH)
    assert node.bytes(backup) == original
    assert "--mem-fraction-static 0.93" in node.host.read(UNIT_PATH)

    outcomes = sorted(r.result["outcome"] for r in runs)
    winners = [r for r in runs if r.result["outcome"] == "remediated"]
    assert len(winners) == 1, [str(r) for r in runs]
    (loser,) = [r for r in runs if r is not winners[0]]
    if loser.result["outcome"] == "unchanged":
        assert loser.returncode == 0  # it read the unit after the winner's commit
    else:
        assert outcomes == ["failed", "remediated"], outcomes
        assert loser.returncode == 1, loser
        error = loser.result["error"]
        assert "another remediation holds the lock" in error or "changed since it was read" in error, error
        assert loser.result["backup"] is None
    assert len(node.backups(UNIT_PATH)) == 1
    assert _changing(node.audit()).count(f"restart {UNIT}") == 1
    assert node.server_info()["max_total_num_tokens"] == 195011


class _EditsBeforeCommit:
    """A real SSH transport; just before the commit script runs, someone edits the unit by hand."""

    def __init__(self, inner: SSHTransport, edit: Any) -> None:
        self.inner = inner
        self.host = inner.host
        self.edit = edit
        self.edited = False

    def open(self) -> None:
        self.inner.open()

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> CommandResult:
        if stdin is not None and stdin.startswith("# remediate commit") and not self.edited:
            self.edit()
            self.edited = True
        return self.inner.run(command, stdin=stdin, timeout=timeout)

    def hold(self, command: str, **kw: Any) -> Any:
        return self.inner.hold(command, **kw)

    def http_get(self, host: str, port: int, path: str, *, timeout: float = 5.0) -> Any:
        return self.inner.http_get(host, port, path, timeout=timeout)

    def close(self) -> None:
        self.inner.close()


def test_edit_between_read_and_commit_aborts_with_nothing_written(incident: Node) -> None:
    node = incident
    hand_edited = node.host.read(UNIT_PATH).replace("LimitNOFILE=1048576", "LimitNOFILE=65536")
    invocation = node.show("InvocationID")["InvocationID"]
    ssh = SSHTransport(node.host.name, SSHOptions(ssh_config=str(node.fleet.ssh_config)))
    transport = _EditsBeforeCommit(ssh, lambda: node.host.write(UNIT_PATH, hand_edited, mode=0o640))
    try:
        result = runner.remediate_host(transport, RunOptions(timeout=30))
    finally:
        transport.close()

    assert transport.edited, "the commit script never ran"
    assert result.outcome == "failed" and result.exit_code == 1
    assert result.error is not None and "changed since it was read" in result.error, result.error
    assert node.host.read(UNIT_PATH) == hand_edited
    assert node.backups(UNIT_PATH) == []
    assert node.ls("/etc/systemd/system") == [UNIT], "no temp file left behind"
    assert _changing(node.audit()) == []
    assert node.show("InvocationID")["InvocationID"] == invocation


def test_crash_during_load_fails_fast_with_the_oom_lines_and_rolls_back(incident: Node) -> None:
    """The incident unit has Restart=on-failure, RestartSec=10: a crash shows as `activating (auto-restart)`,
    not `failed`, and NRestarts only grows 10 s later. The wait must still notice the crash at once."""
    node = incident
    original = node.bytes(UNIT_PATH)
    node.host.set_standin(**FAST_KNOBS, failure="crash_during_load")

    proc = node.popen("oom", "--wait-timeout", "60")
    poll(
        lambda: any("Capture cuda graph failed" in line for line in node.journal()),
        deadline=30,
        what="the remediated server to crash",
    )
    node.host.set_standin(**FAST_KNOBS)
    run = node.finish(proc)

    assert run.returncode == 1, run
    result = run.result
    assert result["outcome"] == "rolled_back", run
    # Seen at once as `activating (auto-restart)` — not after RestartSec, when NRestarts would grow (no clock).
    assert "crashed while loading" in result["error"] and "about to restart it" in result["error"], result["error"]
    assert "NRestarts" not in result["error"], result["error"]
    assert result["journal"] and "out of memory" in result["journal"][0].lower(), result["journal"]
    assert node.bytes(UNIT_PATH) == original
    assert node.healthy() and node.server_info()["max_total_num_tokens"] == 209007


def test_second_run_started_while_the_first_waits_does_not_restart_the_loading_server(incident: Node) -> None:
    """The lock spans the whole run: a run that starts during the first run's wait waits for the lock,
    then reads the remediated, healthy server (unchanged). It must not restart it (a real load is minutes)."""
    node = incident
    node.host.set_standin(time_scale=0.01)  # a 4.5 s load: time for the second run to arrive mid-load
    first = node.popen("oom", "--wait-timeout", "60")
    poll(lambda: f"restart {UNIT}" in node.audit(), deadline=30, what="the first run's restart")
    second = node.popen("oom", "--wait-timeout", "60")
    one, two = node.finish(first), node.finish(second)

    assert one.returncode == 0 and one.result["outcome"] == "remediated", one
    assert two.returncode == 0 and two.result["outcome"] == "unchanged", two
    assert two.result["max_total_num_tokens"] == 195011
    assert _changing(node.audit()).count(f"restart {UNIT}") == 1
    assert len(node.backups(UNIT_PATH)) == 1
    assert "--mem-fraction-static 0.93" in node.host.read(UNIT_PATH)


def test_a_stopped_unit_is_remediated_and_started(incident: Node) -> None:
    """Real systemd 252: `systemctl reset-failed` of a unit that is inactive (not failed) exits 1 with "Unit
    … not loaded"; the transaction must still restart it rather than stop half-way after the write."""
    node = incident
    assert node.host.systemctl("stop", UNIT).returncode == 0
    # sglang < 0.5.23 ends a graceful stop by SIGKILLing itself: the unit is left failed; made inactive here
    node.host.systemctl("reset-failed", UNIT)
    assert node.host.systemctl("reset-failed", UNIT).returncode == 1  # what the transaction meets

    run = node.cli("oom", "--timeout", "60")

    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert "--mem-fraction-static 0.93" in node.host.read(UNIT_PATH)
    assert node.show("ActiveState")["ActiveState"] == "active"
    assert "restart sglang.service" in node.audit()
