"""A commit runs exactly once and is never misreported (issue 20), against a scripted FakeTransport: one token
per commit reused on a re-send, a late first script answered by @@duplicate, a commit shell killed on the host
without a cut read back from its log and files, transport errors after the commit started ending in a record
and the rollback path, and the lock's @@locked line checked."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from remediate.errors import ConnectionLost, TransportError
from remediate.host.common.lock import locked_read, retake
from remediate.models import CommandResult
from tests.support.fake_transport import FakeTransport, state_output
from tests.support.hosts import COMMIT, POLL, commit_ok, info, phases, written_texts
from tests.support.hosts import UNIT_PATH as PATH
from tests.support.hosts import oom_host as make_host
from tests.support.hosts import run_oom as run

LOG = r"\Aflock -E 75 -w \d+ \S+\.lock\.commit true .*\.commit\.[0-9a-f]+\.log"
FILES = r"\Afor p in"
TOKEN = re.compile(r"^log=\S*\.commit\.([0-9a-f]+)\.log$", re.MULTILINE)


def cut(_command: str, _stdin: str | None) -> CommandResult:
    raise ConnectionLost("gpu-01", "connection lost while a command ran")


def tokens(host: FakeTransport) -> list[str]:
    return [m.group(1) for s in host.scripts("# remediate commit") for m in [TOKEN.search(s)] if m]


def records(state: Path) -> list[dict[str, object]]:
    path = state / "transactions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def healthy(host: FakeTransport, invocation: str = "inv-2", tokens_: int = 195011) -> None:
    host.on(POLL, state_output(invocation_id=invocation))
    host.http("/health", 200)
    host.http("/server_info", info(tokens_))


def test_a_commit_sent_again_after_a_cut_keeps_its_token() -> None:
    host = make_host()
    host.on(COMMIT, cut, commit_ok())
    host.on(LOG, "@@nolog\n")
    healthy(host)
    result = run(host)
    assert result.outcome == "remediated", result.error
    sent = tokens(host)
    assert len(sent) == 2 and sent[0] == sent[1], sent


def test_a_late_first_script_wins_the_token_and_the_resend_reads_its_report() -> None:
    """The host showed no trace of the token (the first script had not started yet): sent again, the second
    script finds the token claimed (@@duplicate, touched nothing), and the winner's log is the report."""
    host = make_host()
    host.on(COMMIT, cut, CommandResult("bash -s", 80, "@@duplicate\n", ""))
    host.on(LOG, "@@nolog\n", "@@started\n" + commit_ok() + "@@exit 0\n")
    healthy(host)
    result = run(host)
    assert result.outcome == "remediated", result.error
    assert len(host.scripts("# remediate commit")) == 2 and len(set(tokens(host))) == 1
    assert result.backup == f"{PATH}.bak.oom.1764400000"
    assert len(host.ran(LOG)) == 2


def test_a_token_the_host_shows_started_is_never_sent_again() -> None:
    host = make_host()
    host.on(COMMIT, cut)
    host.on(LOG, "@@started\n" + commit_ok() + "@@exit 0\n")
    healthy(host)
    result = run(host)
    assert result.outcome == "remediated", result.error
    assert len(host.scripts("# remediate commit")) == 1


def new_sha(host: FakeTransport) -> str:
    return hashlib.sha256(written_texts(host.scripts("# remediate commit")[0])[PATH].encode()).hexdigest()


def test_a_commit_shell_killed_without_a_cut_is_read_back_and_rolled_back(_state_dir: Path) -> None:
    """No exit status and no output (the OOM killer took the shell): the log says the unit was renamed, the
    file holds the new bytes: not "nothing was written" — the rollback path puts the old bytes back."""
    host = make_host()
    host.on(COMMIT, CommandResult("bash -s", -1, "", ""), commit_ok(invocation="inv-3", backup=False))
    host.on(LOG, f"@@started\n@@backup 0 {PATH}.bak.oom.1764400000\n@@renamed 0\n")
    host.on(FILES, lambda _c, _s: CommandResult("for", 0, f"{new_sha(host)}  {PATH}\n", ""))
    healthy(host, "inv-3", 209007)
    result = run(host)
    assert result.outcome == "rolled_back", result.error
    error = result.error or ""
    assert "killed on the host" in error and "nothing was written" not in error, error
    assert f"{PATH} has the new bytes" in error, error
    assert phases(result)[-1] == "rollback" and len(host.scripts("# remediate commit")) == 2
    assert [r["event"] for r in records(_state_dir)][-1] == "rolled_back"


def test_a_killed_commit_shell_whose_files_hold_the_new_bytes_despite_its_log_is_rolled_back() -> None:
    """/run filled: the log says nothing after the claim, but the file holds the new bytes."""
    host = make_host()
    host.on(COMMIT, CommandResult("bash -s", -1, "", ""), commit_ok(invocation="inv-3", backup=False))
    host.on(LOG, "")
    host.on(FILES, lambda _c, _s: CommandResult("for", 0, f"{new_sha(host)}  {PATH}\n", ""))
    healthy(host, "inv-3", 209007)
    result = run(host)
    assert result.outcome == "rolled_back", result.error


def test_a_cut_while_the_report_is_read_back_ends_in_a_record_not_exit_3(_state_dir: Path) -> None:
    host = make_host()
    host.on(COMMIT, cut)
    host.on(LOG, cut)
    result = run(host)
    assert result.outcome == "failed" and result.exit_code == 1, (result.exit_code, result.error)
    assert "state on the host is unknown" in (result.error or "")
    assert [r["event"] for r in records(_state_dir)] == ["committing", "unknown"]


def test_a_transport_error_during_the_wait_ends_in_the_rollback_path(_state_dir: Path) -> None:
    def broken(_command: str, _stdin: str | None) -> CommandResult:
        raise TransportError("gpu-01", "channel open failed: administratively prohibited")

    host = make_host()
    host.on(COMMIT, commit_ok(), commit_ok(invocation="inv-3", backup=False))
    host.on(POLL, broken, state_output(invocation_id="inv-3"))
    host.http("/health", 200)
    host.http("/server_info", info(209007))
    result = run(host)
    assert result.outcome == "rolled_back" and result.exit_code == 1, (result.exit_code, result.error)
    assert "administratively prohibited" in (result.error or "")
    assert [r["event"] for r in records(_state_dir)] == ["committing", "committed", "rolling_back", "rolled_back"]


def test_the_lock_taken_back_after_a_reconnect_must_say_locked() -> None:
    host = make_host()
    host.on(COMMIT, cut)
    first = host._rules[0]  # make_host's locked read: the reconnect's read comes back without @@locked
    first.replies.append(first.replies[0].replace("@@locked\n", ""))  # type: ignore[union-attr]
    result = run(host)
    assert result.outcome == "failed", result.error
    assert "state on the host is unknown" in (result.error or ""), result.error
    assert len(host.scripts("# remediate commit")) == 1, "never sent again without the lock"


def test_the_lock_is_taken_back_for_the_unit_found_after_our_commit() -> None:
    host = make_host()
    host.on(COMMIT, cut)
    host.on(LOG, "@@started\n" + commit_ok() + "@@exit 0\n")
    healthy(host)
    assert run(host).outcome == "remediated"
    (again,) = host.retakes
    assert "unit=sglang.service\n" in again.command.replace("'\"'\"'", "'")  # no detection again
    assert again.expect == "@@locked" and again.timeout >= 450
    assert "still holds $lock.commit" in again.command  # it waits for our commit script first


def test_a_locked_read_without_locked_is_an_error() -> None:
    host = make_host()
    rule = host._rules[0]
    rule.replies[0] = rule.replies[0].replace("@@locked\n", "")  # type: ignore[union-attr]
    with pytest.raises(TransportError, match="@@locked"), locked_read(host, "sglang.service", 5):
        pass


def test_retake_waits_for_the_commit_longer_than_the_lock_wait() -> None:
    again = retake("@@locked\n@@unit llm-alias.service\n@@show\n@@end\n", "llm-alias.service", 5)
    assert "flock -w 450 8" in again.command and again.expect == "@@locked"


def test_a_cut_during_the_probe_ends_in_a_record_and_the_rollback_path_not_exit_3(_state_dir: Path) -> None:
    """--probe's request after the restart loses the connection: the commit started, so the run reconnects,
    records and rolls back (never "unreachable", exit 3, with no record)."""
    host = make_host()
    host.on(r"\Adate \+%s", "1764400100\n")
    host.on(COMMIT, commit_ok(), commit_ok(invocation="inv-3", backup=False))
    host.on(
        POLL,
        state_output(invocation_id="inv-2"),
        state_output(invocation_id="inv-2"),
        state_output(invocation_id="inv-3"),
    )
    host.http("/health", 200)
    host.http("/server_info", info(195011))
    host.http("/flush_cache", (200, "Cache flushed.\n"))

    def lost(_body: bytes) -> None:
        raise ConnectionLost("gpu-01", "connection lost during the probe's request")

    host.stream("/generate", lost)
    result = run(host, probe_tokens=32768)
    assert result.outcome == "rolled_back" and result.exit_code == 1, (result.outcome, result.exit_code, result.error)
    assert "connection lost during the probe's request" in (result.error or ""), result.error
    assert host.reconnects == 1 and len(host.scripts("# remediate commit")) == 2  # the change, then the undo
    assert [r["event"] for r in records(_state_dir)] == ["committing", "committed", "rolling_back", "rolled_back"]
