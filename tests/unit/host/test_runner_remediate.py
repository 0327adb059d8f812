"""The single-host runner against a scripted FakeTransport: probe → plan → commit → wait → verify → rollback."""

from __future__ import annotations

import json

import pytest

from remediate.host.common.options import RunOptions
from remediate.host.oom.runner import remediate_host
from remediate.models import CommandResult
from tests.support.clock import Naps
from tests.support.fake_transport import FakeTransport, listener_output, probe_output, state_output
from tests.support.hosts import (
    COMMIT,
    EPOCH,
    INCIDENT,
    NOW,
    POLL,
    commit_error,
    commit_ok,
    info,
    phases,
    remediated_text,
    written_texts,
)
from tests.support.hosts import KIMI_ARGV as ARGV
from tests.support.hosts import UNIT_PATH as PATH
from tests.support.hosts import oom_host as make_host
from tests.support.hosts import run_oom as run

UNIT = "sglang.service"
PROBE = r"# remediate probe"  # run (status) or held (oom: detection, lock and read in one)
JOURNAL = r"\Ajournalctl"
CAPACITY_LINE = (
    "[2026-11-29 07:14:22 TP0] max_total_num_tokens=195011, chunked_prefill_size=4096, max_prefill_tokens=16384, "
    "max_running_requests=6, context_len=262144, available_gpu_mem=1.81 GB"
)


# -- success -----------------------------------------------------------------------------------


def test_remediated_phases_in_order(naps: Naps) -> None:
    host = make_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output("activating", "start", invocation_id="inv-2", main_pid=5000))
    host.http("/health", None, None, 503, 200)
    host.http("/server_info", info(206635))
    result = run(host, sleep=naps)
    assert result.outcome == "remediated", result.error
    assert result.exit_code == 0 and result.error is None
    assert phases(result) == ["connect", "lock", "read", "plan", "commit", "wait", "verify"]
    assert result.unit == UNIT and result.unit_path == PATH
    assert result.max_total_num_tokens == 206635
    assert result.backup == f"{PATH}.bak.oom.{EPOCH}"
    assert result.flags_before["mem_fraction_static"] == "0.94"
    assert result.flags_after == {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"}
    assert result.env_after == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    [script] = host.scripts("# remediate commit")
    assert written_texts(script) == {PATH: remediated_text()}
    assert len(host.ran(POLL)) == 2  # the state: on the first poll (refused), and once the server answers
    assert [c.path for c in host.http_calls] == ["/health"] * 4 + ["/server_info"]
    assert {(c.host, c.port) for c in host.http_calls} == {("127.0.0.1", 30000)}
    assert len(naps) == 3
    assert host.opened == 1


def test_endpoint_from_port_flag() -> None:
    argv = [*ARGV[:7], "--port=31000", *ARGV[11:]]
    host = make_host(argv=argv)
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", info(206635))
    result = run(host)
    assert result.outcome == "remediated", result.error
    assert {(c.host, c.port) for c in host.http_calls} == {("127.0.0.1", 31000)}


def test_tokens_from_old_endpoint_then_journal() -> None:
    host = make_host(journal=CAPACITY_LINE)
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", 404)
    host.http("/get_server_info", 404)
    result = run(host)
    assert result.outcome == "remediated", result.error
    assert result.max_total_num_tokens == 195011
    assert len(host.fetched("/server_info")) == 1 and len(host.fetched("/get_server_info")) == 1


def test_target_tokens_gap_is_a_warning() -> None:
    host = make_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", info(195011))
    result = run(host, target_tokens=200000)
    assert result.outcome == "remediated" and result.exit_code == 0
    assert result.token_gap is not None and round(result.token_gap, 4) == -0.0249
    [warning] = result.warnings
    assert "2.5%" in warning and "195,011" in warning and "200,000" in warning


def test_unchanged_when_already_remediated_and_healthy() -> None:
    host = make_host(remediated_text(), active="active")
    host.http("/server_info", info(195011))
    result = run(host)
    assert result.outcome == "unchanged" and result.exit_code == 0
    assert result.max_total_num_tokens == 195011
    assert result.changed is False and result.steps == []
    assert host.scripts("# remediate commit") == []
    assert host.ran(POLL) == []
    assert phases(result) == ["connect", "lock", "read", "plan"]
    assert len(host.held) == 1 and "@@locked" in host.held[0]  # even a no-op run reads under the lock


def test_already_remediated_but_down_is_restarted_without_writes() -> None:
    host = make_host(remediated_text(), active="failed")
    host.on(COMMIT, commit_ok(backup=False, wrote=False))
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", info(195011))
    result = run(host)
    assert result.outcome == "remediated", result.error
    [script] = host.scripts("# remediate commit")
    assert written_texts(script) == {}
    assert "systemctl restart" in script
    assert any("already remediated" in note for note in result.notes)


def test_dry_run_sends_no_commit() -> None:
    host = make_host()
    result = run(host, dry_run=True)
    assert result.outcome == "unchanged"  # nothing was changed; `changed` and the diff say what a real run would do
    assert result.is_dry_run is True and result.to_dict()["dry_run"] is True
    assert result.changed is True
    assert "+    --mem-fraction-static 0.93 \\" in result.diff
    assert any(step.startswith("flock ") for step in result.steps)
    assert any(step.startswith(f"copy {PATH} to {PATH}.bak.oom.{EPOCH}") for step in result.steps)
    assert host.scripts("# remediate commit") == []
    assert host.http_calls == []
    assert [c.command for c in host.calls] == ["bash -s"]  # the probe only


# -- commit failures ---------------------------------------------------------------------------


def test_conflict_aborts_without_rollback() -> None:
    host = make_host()
    host.on(COMMIT, commit_error(76, f"conflict {PATH} changed since it was read (sha256 abc, expected def)"))
    result = run(host)
    assert result.outcome == "failed" and result.exit_code == 1
    assert result.error is not None and "aborted, nothing written" in result.error and PATH in result.error
    assert len(host.scripts("# remediate commit")) == 1
    assert "rollback" not in phases(result)


def test_verify_failure_after_write_rolls_back_and_reports_both() -> None:
    host = make_host()
    host.on(
        COMMIT,
        commit_error(77, f"verify {PATH} has sha256 bad after the write, expected good", "@@renamed 0\n"),
        commit_error(76, f"conflict {PATH} changed since it was read"),
    )
    result = run(host)
    assert result.outcome == "failed" and result.exit_code == 1
    assert result.error is not None
    assert f"commit failed: {PATH} has sha256 bad after the write" in result.error, result.error
    assert "the rollback failed too" in result.error and result.error.count("gpu-01: ") == 1, result.error
    assert len(host.scripts("# remediate commit")) == 2


def test_need_daemon_reload_after_reload_rolls_back() -> None:
    host = make_host()
    host.on(
        COMMIT,
        commit_error(78, "reload NeedDaemonReload=yes after daemon-reload", "@@renamed 0\n"),
        commit_ok(invocation="inv-3"),
    )
    host.on(POLL, state_output(invocation_id="inv-3"))
    host.http("/health", 200)
    host.http("/server_info", info(180000))
    result = run(host)
    assert result.outcome == "rolled_back" and result.exit_code == 1
    assert result.error is not None and "NeedDaemonReload=yes" in result.error
    first, undo = host.scripts("# remediate commit")
    assert written_texts(undo) == {PATH: INCIDENT}


# -- waiting: fail fast ------------------------------------------------------------------------


FAIL_FAST = {
    "active-state-failed": [
        state_output("activating", "start", invocation_id="inv-2", main_pid=5000),
        state_output("failed", "failed", result="exit-code", invocation_id="inv-2", main_pid=0),
    ],
    "nrestarts-grows": [
        state_output("activating", "start", invocation_id="inv-2", main_pid=5000),
        state_output("activating", "auto-restart", invocation_id="inv-2", n_restarts=1, main_pid=0),
    ],
    "mainpid-changes": [
        state_output("activating", "start", invocation_id="inv-2", main_pid=5000),
        state_output("activating", "start", invocation_id="inv-2", main_pid=5001),
    ],
    "invocation-changes": [
        state_output("activating", "start", invocation_id="inv-2", main_pid=5000),
        state_output("activating", "start", invocation_id="inv-9", main_pid=5000),
    ],
}


@pytest.mark.parametrize("polls", FAIL_FAST.values(), ids=FAIL_FAST.keys())
def test_wait_fails_fast_without_rollback(polls: list[str]) -> None:
    host = make_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, *polls)
    host.http("/health", None)  # still loading: would poll until the timeout without fail-fast
    result = run(host, rollback=False, timeout=900)
    assert result.outcome == "failed" and result.exit_code == 1
    assert len(host.ran(POLL)) == 2  # the second poll saw the crash
    assert len(host.scripts("# remediate commit")) == 1
    assert phases(result) == ["connect", "lock", "read", "plan", "commit", "wait"]
    assert result.journal[0] == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert "HF_TOKEN=***" in "\n".join(result.journal)
    assert "hf_abc123" not in json.dumps(result.to_dict())
    [journal_call] = host.ran(JOURNAL)
    assert f"--since @{EPOCH}" in journal_call.command


def test_crash_rolls_back_to_the_old_bytes() -> None:
    host = make_host()
    host.on(COMMIT, commit_ok(invocation="inv-2"), commit_ok(invocation="inv-3", backup=False))
    host.on(
        POLL,
        state_output("activating", "start", invocation_id="inv-2", main_pid=5000),
        state_output("failed", "failed", result="exit-code", invocation_id="inv-2", main_pid=0),
        state_output("active", "running", invocation_id="inv-3", main_pid=6000),
    )
    host.http("/health", None, 200)
    host.http("/server_info", info(180000))
    result = run(host)
    assert result.outcome == "rolled_back" and result.exit_code == 1
    assert phases(result) == ["connect", "lock", "read", "plan", "commit", "wait", "rollback"]
    assert result.error is not None and "failed" in result.error and "rolled back" in result.error
    assert result.journal[0].startswith("torch.OutOfMemoryError")
    forward, undo = host.scripts("# remediate commit")
    assert written_texts(forward) == {PATH: remediated_text()}
    assert written_texts(undo) == {PATH: INCIDENT}
    assert "tags=( oom )" in forward and "tags=( '' )" in undo  # the rollback makes no second backup
    assert result.max_total_num_tokens == 180000  # the old server's


def test_rollback_that_fails_too() -> None:
    host = make_host()
    host.on(COMMIT, commit_ok(invocation="inv-2"), commit_ok(invocation="inv-3", backup=False))
    host.on(POLL, state_output("failed", "failed", result="exit-code", invocation_id="inv-2", main_pid=0))
    host.http("/health", None)
    result = run(host)
    assert result.outcome == "failed" and result.exit_code == 1
    assert result.error is not None and "the rollback failed too" in result.error
    # the undo's commit held, its wait did not: the message says what the host holds
    assert f"the previous bytes of {PATH} are back and {UNIT} was restarted on them" in result.error
    assert "the old server did not come up either" in result.error


def test_rollback_whose_commit_fails_does_not_claim_the_old_bytes_are_back() -> None:
    host = make_host()
    host.on(COMMIT, commit_ok(invocation="inv-2"), commit_error(1, "systemctl daemon-reload: injected"))
    host.on(POLL, state_output("failed", "failed", result="exit-code", invocation_id="inv-2", main_pid=0))
    host.http("/health", None)
    result = run(host)
    assert result.outcome == "failed" and result.exit_code == 1
    assert result.error is not None and "the rollback failed too" in result.error, result.error
    assert "are back" not in result.error and "did not come up either" not in result.error, result.error


def test_min_tokens_below_rolls_back() -> None:
    host = make_host()
    host.on(COMMIT, commit_ok(invocation="inv-2"), commit_ok(invocation="inv-3", backup=False))
    host.on(
        POLL,
        state_output(invocation_id="inv-2"),
        state_output(invocation_id="inv-3", main_pid=6000),
    )
    host.http("/health", 200)
    host.http("/server_info", info(150000), info(206635))
    result = run(host, min_tokens=200000)
    assert result.outcome == "rolled_back" and result.exit_code == 1
    assert result.error is not None and "below --min-tokens 200,000" in result.error
    assert phases(result) == ["connect", "lock", "read", "plan", "commit", "wait", "verify", "rollback"]
    _, undo = host.scripts("# remediate commit")
    assert written_texts(undo) == {PATH: INCIDENT}


def test_min_tokens_below_without_rollback_fails() -> None:
    host = make_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", info(150000))
    result = run(host, min_tokens=200000, rollback=False)
    assert result.outcome == "failed" and result.exit_code == 1
    assert len(host.scripts("# remediate commit")) == 1


def test_timeout_counts_polls_not_seconds() -> None:
    """A tiny timeout stops after the first poll (tenacity's stop_before_delay), then rolls back."""
    host = make_host()
    host.on(COMMIT, commit_ok(invocation="inv-2"), commit_ok(invocation="inv-3", backup=False))
    host.on(POLL, state_output("activating", "start", invocation_id="inv-2"))
    host.http("/health", None)
    options = RunOptions(rollback=False)
    object.__setattr__(options, "timeout", 1e-9)  # below what any face accepts (core/bounds.py): the poll's rule
    result = remediate_host(host, options, now=lambda: NOW)  # type: ignore[arg-type]
    assert result.outcome == "failed"
    assert result.error is not None and "not healthy after" in result.error
    assert len(host.ran(POLL)) == 1


# -- reading -----------------------------------------------------------------------------------


def test_several_sglang_units_is_bad_input() -> None:
    host = FakeTransport("gpu-01")
    host.on(PROBE, probe_output(None, {}, candidates=["a.service", "b.service"]))
    result = run(host)
    assert result.outcome == "failed" and result.exit_code == 2
    assert result.error is not None and "a.service, b.service" in result.error and "--unit" in result.error
    assert host.calls == [] and len(host.held) == 1  # the detection is the locked read's first step


def test_probe_failure_is_a_transport_error() -> None:
    host = FakeTransport("gpu-01")
    host.on(PROBE, CommandResult(argv="bash -s", exited=255, stdout="", stderr="bash: no such thing\n"))
    result = run(host)
    assert result.outcome == "unreachable" and result.exit_code == 3
    assert result.error is not None and "probe failed" in result.error


# -- the fake itself ---------------------------------------------------------------------------


def test_fake_refuses_unscripted_commands_and_repeats_its_last_reply() -> None:
    from remediate.transport.base import Transport
    from tests.support.fake_transport import UnscriptedCommandError

    host: Transport = FakeTransport("h").on(r"\Aecho", "one\n", 3).http("/health", None, 503, 200)
    assert [host.run("echo").stdout, host.run("echo").exited, host.run("echo").exited] == ["one\n", 3, 3]
    assert [host.http_get("127.0.0.1", 1, "/health").status for _ in range(4)] == [None, 503, 200, 200]
    assert host.http_get("127.0.0.1", 1, "/other").status == 404
    with pytest.raises(UnscriptedCommandError):
        host.run("rm -rf /")


def test_lock_held_by_another_run_fails_clearly_before_reading() -> None:
    host = FakeTransport("gpu-01")
    host.on(r"@@locked", CommandResult("bash -c", 75, "", "@@error lock another remediation holds the lock\n"))
    result = run(host, unit=UNIT)  # the read comes after the lock in the same script: nothing was read
    assert result.outcome == "failed" and result.exit_code == 1
    assert result.error == "gpu-01: another remediation holds the lock on gpu-01"
    assert host.calls == [] and len(host.held) == 1
    assert phases(result) == ["connect", "lock"]


def test_an_owner_check_that_could_not_run_is_said_in_the_notes() -> None:
    """ss missing on the host: the answer is taken as the unit's (nothing to check it with), and the result
    says it was not proven, instead of passing in silence."""
    host = make_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output("activating", "start", invocation_id="inv-2", main_pid=5000))
    host.http("/health", 200)
    host.http("/server_info", info(206635))
    host.on(r"\A# remediate: listener", listener_output().replace("@@listen\n", "@@listen\n@@nosockets\n"))
    result = run(host)
    assert result.outcome == "remediated", result.error
    assert any("port's owner is not checked" in note for note in result.notes), result.notes


def test_the_environment_read_with_the_last_look_is_what_verify_checks() -> None:
    """The wait's last look brings the server's environment: no round trip of its own, and a server that lacks
    the alloc conf there is rolled back as if it had been read apart."""
    running = {"ActiveState": "active", "SubState": "running", "NRestarts": 0, "InvocationID": "inv-2"}
    for value, outcome in (("expandable_segments:True", "remediated"), ("", "rolled_back")):
        host = make_host()
        host.on(COMMIT, commit_ok())
        host.on(POLL, state_output("activating", "start", invocation_id="inv-2"))
        environ = f"@@main 4242\n@@environ 4242\n{'PYTORCH_CUDA_ALLOC_CONF=' + value if value else ''}\n@@end\n"
        look = listener_output(listen="0.0.0.0:30000", state=running, environ=environ)
        host.on(r"\A# remediate: listener", look)
        host.http("/health", 200)
        host.http("/server_info", info(206635))
        result = run(host)
        assert result.outcome == outcome, result.error
        assert host.scripts("# remediate: environ") == []  # read with the look
        [listener] = host.ran(r"\A# remediate: listener")[:1]
        assert "@@main" in listener.command


def test_systemd_analyze_verifies_the_fragment_the_locked_read_found() -> None:
    """No `systemctl show -p FragmentPath` in the commit: the read's fragment is rendered in (asked only when empty)."""
    from remediate.host.common.commit import FileWrite, render_commit

    writes = [FileWrite(PATH, "a\n", "b\n")]
    script = render_commit(UNIT, writes, epoch=1, restart=True, analyze=True, token="t", fragment=PATH)
    assert f"frag={PATH}\n" in script
    blank = render_commit(UNIT, writes, epoch=1, restart=True, analyze=True, token="t")
    assert "frag=''\n" in blank and "-p FragmentPath" in blank
