"""The transaction under faults, against a scripted FakeTransport: commits that wrote nothing, partial
commits, connections cut during the commit and the wait (reconnect and resume), and unit names."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.core.backups import Backup, choose, make_backup, mark_truncated, select_prune
from remediate.errors import ConfigError, ConnectError, ConnectionLost
from remediate.host.common.lock import commit_log_path, lock_path
from remediate.host.common.options import RunOptions
from remediate.models import CommandResult
from remediate.transport.known_hosts import read_known_hosts
from tests.support.fake_transport import state_output
from tests.support.hosts import COMMIT, POLL, commit_ok, info, phases
from tests.support.hosts import UNIT_PATH as PATH
from tests.support.hosts import oom_host as make_host
from tests.support.hosts import run_oom as run

LOG = r"\Aflock -E 75 -w \d+ /run/remediate/sglang\.service\.lock\.commit true .*\.commit\.[0-9a-f]+\.log"


def failing(stdout: str, code: int = 1) -> CommandResult:
    return CommandResult("bash -s", code, stdout + f"@@exit {code}\n", "")


def cut(_command: str, _stdin: str | None) -> CommandResult:
    raise ConnectionLost("gpu-01", "connection lost while a command ran")


# -- a commit that wrote nothing runs no undo -----------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    [
        "mktemp: failed to create file via template '/etc/systemd/system/.remediate.XXXXXX': Read-only file system\n"
        "@@failed staging of the new /etc/systemd/system/sglang.service in /etc/systemd/system\n",
        "chown: changing ownership of '/etc/systemd/system/.remediate.abc': Operation not permitted\n"
        "@@failed staging of the new /etc/systemd/system/sglang.service in /etc/systemd/system\n",
        "cp: error writing '/etc/systemd/system/.remediate-backup.x': No space left on device\n"
        "@@failed backup of /etc/systemd/system/sglang.service to /etc/systemd/system/sglang.service.bak.oom.1\n",
    ],
    ids=["read-only", "chown", "full-disk"],
)
def test_a_commit_that_wrote_nothing_runs_no_undo_and_says_so(output: str) -> None:
    host = make_host()
    host.on(COMMIT, failing(output))
    result = run(host)
    assert result.outcome == "failed" and result.exit_code == 1
    assert len(host.scripts("# remediate commit")) == 1, "no undo for a commit that wrote nothing"
    assert "rollback" not in phases(result)
    error = result.error or ""
    assert "nothing was written" in error and "rollback failed" not in error, error
    assert error.count("gpu-01: ") == 1 and "at cp:" not in error and "exit: -1" not in error, error
    assert output.splitlines()[0].split(": ", 1)[1] in error  # the tool's own reason, unframed


def test_a_partial_commit_is_undone_and_the_undo_does_not_fail_on_the_file_never_written() -> None:
    host = make_host()
    host.on(
        COMMIT, failing("@@renamed 0\n@@failed systemctl daemon-reload\n"), commit_ok(invocation="inv-3", backup=False)
    )
    host.on(POLL, state_output(invocation_id="inv-3"))
    host.http("/health", 200)
    host.http("/server_info", info(209007))
    result = run(host)
    assert result.outcome == "rolled_back", result.error
    assert "during the systemctl daemon-reload" in (result.error or "")
    assert phases(result)[-1] == "rollback"


# -- a connection cut during the commit: reconnect, read the host's log, carry on -----------------------


def test_a_cut_during_the_commit_reconnects_and_reads_the_result_from_the_host() -> None:
    host = make_host()
    host.on(COMMIT, cut)
    host.on(LOG, commit_ok() + "@@exit 0\n")
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", info(195011))
    result = run(host)
    assert result.outcome == "remediated", result.error
    assert host.reconnects == 1 and len(host.scripts("# remediate commit")) == 1
    assert result.backup == f"{PATH}.bak.oom.1764400000"


def test_a_cut_before_the_script_ran_sends_it_again() -> None:
    host = make_host()
    host.on(COMMIT, cut, commit_ok())
    host.on(LOG, "@@nolog\n")
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", info(195011))
    result = run(host)
    assert result.outcome == "remediated", result.error
    assert len(host.scripts("# remediate commit")) == 2


def test_a_cut_during_the_commit_that_cannot_reconnect_says_the_state_is_unknown_and_rerunning_is_safe() -> None:
    host = make_host()
    host.on(COMMIT, cut)
    host.reconnect_error = ConnectError("gpu-01", "connection refused")
    result = run(host)
    assert result.outcome == "failed" and result.exit_code == 1, "not 'unreachable' (3): the commit was sent"
    error = result.error or ""
    assert "state on the host is unknown" in error and "Re-running `remediate oom` is safe" in error, error
    assert error.count("gpu-01: ") == 1, error
    assert "rollback" not in phases(result)


def test_a_commit_script_killed_on_the_host_reports_each_file_state() -> None:
    host = make_host()
    host.on(COMMIT, cut)
    host.on(LOG, "@@backup 0 /etc/systemd/system/sglang.service.bak.oom.1764400000\n")
    host.on(r"\Afor p in", f"0000  {PATH}\n")
    result = run(host)
    assert result.outcome == "failed"
    error = result.error or ""
    assert "killed on the host before its end" in error and f"{PATH} has sha256 0000" in error, error
    assert "nothing was written" not in error, error


# -- a connection cut during the wait: reconnect and finish ---------------------------------------------


def test_a_cut_during_the_wait_reconnects_and_finishes() -> None:
    host = make_host()
    host.on(COMMIT, commit_ok())
    host.on(
        POLL,
        state_output("activating", "start", invocation_id="inv-2", main_pid=5000),
        cut,
        state_output(invocation_id="inv-2", main_pid=5000),
    )
    host.http("/health", None, 200)
    host.http("/server_info", info(195011))
    result = run(host)
    assert result.outcome == "remediated", result.error
    assert host.reconnects == 1


def test_a_cut_during_the_wait_that_cannot_reconnect_is_not_reported_as_unreachable() -> None:
    host = make_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, cut)
    host.reconnect_error = ConnectError("gpu-01", "connection timed out")
    result = run(host, timeout=5)
    assert result.outcome == "failed" and result.exit_code == 1
    error = result.error or ""
    assert "lost while waiting for the server" in error and "re-running `remediate oom` is safe" in error.lower()


# -- unit names ------------------------------------------------------------------------------------------


def test_sglang_and_sglang_service_take_one_lock() -> None:
    assert lock_path("sglang") == lock_path("sglang.service") == "/run/remediate/sglang.service.lock"
    assert RunOptions(unit="sglang").unit == "sglang.service"
    assert commit_log_path("sglang", "ab").startswith("/run/remediate/sglang.service.commit.")


@pytest.mark.parametrize(
    "bad", ["a/../../x", "../x.service", "-p.service", "x y", "sglang@.service", "sglang.socket", ""]
)
def test_a_unit_name_systemd_would_refuse_is_bad_input(bad: str) -> None:
    with pytest.raises(ConfigError) as exc:
        RunOptions(unit=bad)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)


@pytest.mark.parametrize("good", ["sglang", "sglang-kimi.service", "sglang@0.service", "my_unit:1\\x2d2"])
def test_valid_unit_names_pass(good: str) -> None:
    assert RunOptions(unit=good).unit is not None


# -- backups: a truncated copy is never "latest", never one of the kept --------------------------------


def _backup(epoch: int, text: str, original_size: int) -> Backup:
    made = make_backup(f"{PATH}.bak.oom.{epoch}", text=text, sha256=str(epoch), size=len(text), mtime=0.0)
    assert made is not None
    return mark_truncated(made, original_size)


def test_a_truncated_newest_backup_is_flagged_and_skipped_by_latest_and_prune() -> None:
    full = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server\n"
    older, newer = _backup(1764400000, full, len(full)), _backup(1764400100, "", len(full))
    assert newer.truncated and not older.truncated
    assert choose([newer, older], "latest") == [older]
    with pytest.raises(ConfigError, match="truncated"):
        choose([newer, older], newer.path)
    assert select_prune([newer, older], 1, {}) == []  # the one complete backup is kept; the empty one is left
    assert (
        not _backup(1764400200, "x" * 4096, 5000).text.endswith("\n")
        and _backup(1764400200, "x" * 4096, 5000).truncated
    )


# -- known_hosts: markers understood, bad lines skipped ------------------------------------------------


def test_known_hosts_markers_and_malformed_lines(tmp_path: Path) -> None:
    good = "AAAAC3NzaC1lZDI1NTE5AAAAIHJlbWVkaWF0ZS1ob3N0LWtleS1mb3ItdGVzdHMhIQ=="
    bad = "AAAAC3NzaC1lZDI1NTE5AAAAIHJldm9rZWQtaG9zdC1rZXktZm9yLXRlc3RzISEhIQ=="
    known = tmp_path / "known_hosts"
    known.write_text(
        "# comment\n"
        "@cert-authority *.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGNh\n"
        f"@revoked * ssh-ed25519 {bad}\n"
        "gpu-01 ssh-ed25519 not-base64!!\n"
        "short-line\n"
        f"gpu-01,10.0.0.1 ssh-ed25519 {good}\n"
        f"gpu-02 ssh-ed25519 {bad}\n"
    )
    found = read_known_hosts([known, tmp_path / "missing"])
    assert found.authorities == 1 and found.revoked == {bad}
    assert [(e.names, e.key_b64) for e in found.entries] == [(("gpu-01", "10.0.0.1"), good)]
    assert "@cert-authority" in found.hint()
