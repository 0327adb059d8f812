"""Detection, pure: the poll command, its answer taken apart, and what counts as a new crash."""

from __future__ import annotations

import json

from remediate.core.watch.detect import Observation, Poll, crash_reason, parse_poll, poll_command


def _entry(cursor: str, message: object, at_us: int = 1_700_000_000_000_000, inv: str = "inv1") -> str:
    return json.dumps(
        {"__CURSOR": cursor, "__REALTIME_TIMESTAMP": str(at_us), "MESSAGE": message, "_SYSTEMD_INVOCATION_ID": inv}
    )


def _show(active: str = "active", sub: str = "running", restarts: int = 0, inv: str = "inv1", status: int = 0) -> str:
    return (
        f"ActiveState={active}\nSubState={sub}\nResult=success\nNRestarts={restarts}\n"
        f"InvocationID={inv}\nExecMainStatus={status}\nMainPID=42\n"
    )


def test_command_quotes_and_bounds() -> None:
    cmd = poll_command("sglang.service", "s=1;i=2", None)
    assert "--after-cursor 's=1;i=2'" in cmd and "-n 2000" in cmd and "-o json" in cmd
    assert "--since @1700000000" in poll_command("a b.service", None, 1_700_000_000.9)
    assert "'a b.service'" in poll_command("a b.service", None, None)


def test_parse_poll() -> None:
    text = (
        _show(restarts=2)
        + "@@journal\n"
        + "\n".join([_entry("c1", "hello"), "not json", _entry("c2", [104, 105]), json.dumps({"no": "cursor"})])
    )
    poll = parse_poll(text)
    assert poll.observation == Observation("active", "running", "success", 2, "inv1", 0, 42)
    assert [e.message for e in poll.entries] == ["hello", "hi"] and poll.cursor == "c2"
    assert poll.entries[0].at == 1_700_000_000.0


def test_unreadable_is_never_a_crash() -> None:
    poll = parse_poll("@@journal\n" + _entry("c1", "sglang.service: Failed with result 'exit-code'."))
    assert poll.observation is None and crash_reason(None, poll) is None


def test_crash_rules() -> None:
    running = parse_poll(_show()).observation
    assert crash_reason(running, parse_poll(_show())) is None
    failed = parse_poll(_show("failed", "failed"))
    assert "failed" in (crash_reason(running, failed) or "")
    assert crash_reason(failed.observation, failed) is None  # still the same failure: not a new crash
    restarting = parse_poll(_show("activating", "auto-restart", restarts=1))
    assert crash_reason(running, restarting)
    restarted = parse_poll(_show(restarts=1, inv="inv2"))  # Restart= already brought it back
    assert "NRestarts 0 → 1" in (crash_reason(running, restarted) or "")
    died = "sglang.service: Main process exited, code=exited, status=1/FAILURE"
    again = parse_poll(_show(inv="inv2") + "@@journal\n" + _entry("c9", died))
    assert "invocation changed" in (crash_reason(running, again) or "")
    clean = "sglang.service: Main process exited, code=exited, status=0/SUCCESS"
    assert crash_reason(running, parse_poll(_show(inv="inv2") + "@@journal\n" + _entry("c9", clean))) is None
    assert crash_reason(running, Poll(None, ())) is None


def test_first_poll_with_lookback() -> None:
    """No saved state: a failed unit, or a crash in the lookback journal, is a crash."""
    assert crash_reason(None, parse_poll(_show("failed", "failed")))
    killed = "sglang.service: Main process exited, code=killed, status=9/KILL"
    assert crash_reason(None, parse_poll(_show() + "@@journal\n" + _entry("c1", killed))) == killed
    assert crash_reason(None, parse_poll(_show(restarts=5))) is None
