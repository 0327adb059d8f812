"""Detection, pure: the poll command, its answer taken apart, and what counts as a new crash."""

from __future__ import annotations

import json

from remediate.core.watch.detect import (
    CrashTime,
    Observation,
    Poll,
    crash_reason,
    crash_times,
    parse_poll,
    poll_command,
)

UNIT = "sglang.service"


def _entry(cursor: str, message: object, at_us: int = 1_700_000_000_000_000, inv: str = "inv1") -> str:
    """A line of systemd's about the unit, as PID 1 writes it (journald's trusted _PID, UNIT=, INVOCATION_ID=)."""
    return json.dumps(
        {"__CURSOR": cursor, "__REALTIME_TIMESTAMP": str(at_us), "MESSAGE": message, "_PID": "1", "UNIT": UNIT}
        | {"INVOCATION_ID": inv}
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
    poll = parse_poll(text, UNIT)
    assert poll.observation == Observation("active", "running", "success", 2, "inv1", 0, 42)
    assert [e.message for e in poll.entries] == ["hello", "hi"] and poll.cursor == "c2"
    assert poll.entries[0].at == 1_700_000_000.0


def test_unreadable_is_never_a_crash() -> None:
    poll = parse_poll("@@journal\n" + _entry("c1", "sglang.service: Failed with result 'exit-code'."), UNIT)
    assert poll.observation is None and crash_reason(None, poll) is None


def test_crash_rules() -> None:
    running = parse_poll(_show(), UNIT).observation
    assert crash_reason(running, parse_poll(_show(), UNIT)) is None
    failed = parse_poll(_show("failed", "failed"), UNIT)
    assert "failed" in (crash_reason(running, failed) or "")
    assert crash_reason(failed.observation, failed) is None  # still the same failure: not a new crash
    restarting = parse_poll(_show("activating", "auto-restart", restarts=1), UNIT)
    assert crash_reason(running, restarting)
    restarted = parse_poll(_show(restarts=1, inv="inv2"), UNIT)  # Restart= already brought it back
    assert "NRestarts 0 → 1" in (crash_reason(running, restarted) or "")
    died = "sglang.service: Main process exited, code=exited, status=1/FAILURE"
    again = parse_poll(_show(inv="inv2") + "@@journal\n" + _entry("c9", died), UNIT)
    assert "invocation changed" in (crash_reason(running, again) or "")
    clean = "sglang.service: Main process exited, code=exited, status=0/SUCCESS"
    assert crash_reason(running, parse_poll(_show(inv="inv2") + "@@journal\n" + _entry("c9", clean), UNIT)) is None
    assert crash_reason(running, Poll(None, ())) is None


def test_first_poll_with_lookback() -> None:
    """No saved state: a failed unit, or a crash in the lookback journal, is a crash."""
    assert crash_reason(None, parse_poll(_show("failed", "failed"), UNIT))
    killed = "sglang.service: Main process exited, code=killed, status=9/KILL"
    assert crash_reason(None, parse_poll(_show() + "@@journal\n" + _entry("c1", killed), UNIT)) == killed
    assert crash_reason(None, parse_poll(_show(restarts=5), UNIT)) is None


T0 = 1_700_000_000.0
EXITED = "sglang.service: Main process exited, code=exited, status=1/FAILURE"
FAILED = "sglang.service: Failed with result 'exit-code'."


def _journal(*lines: tuple[str, str, float, str]) -> str:
    return "@@journal\n" + "\n".join(_entry(c, m, int(t * 1e6), inv) for c, m, t, inv in lines)


def test_a_crash_is_its_invocation_at_its_exit_time() -> None:
    running = parse_poll(_show(), UNIT).observation
    # One crash is two systemd lines of one invocation: one crash, at the main process's exit.
    one = parse_poll(
        _show("activating", "auto-restart") + _journal(("c1", EXITED, T0, "inv1"), ("c2", FAILED, T0 + 0.01, "inv1")),
        UNIT,
    )
    assert crash_times(running, one, T0 + 3, 3600) == (CrashTime("inv1", T0),)
    # A crash loop read by one poll (a watcher that was dead): each invocation once, at its own time.
    loop = parse_poll(_show(inv="inv3") + _journal(("c1", EXITED, T0, "inv1"), ("c2", FAILED, T0, "inv1"),
                                                   ("c3", EXITED, T0 + 20, "inv2")), UNIT)  # fmt: skip
    assert [(c.key, c.at) for c in crash_times(running, loop, T0 + 60, 3600)] == [("inv1", T0), ("inv2", T0 + 20)]
    # Without invocation ids: the lines of one exit (within a second) are one crash, keyed by its time.
    bare = parse_poll(_show("failed", "failed") + _journal(("c1", EXITED, T0, ""), ("c2", FAILED, T0 + 0.2, "")), UNIT)
    assert crash_times(running, bare, T0 + 1, 3600) == (CrashTime(f"exit@{T0:.3f}", T0),)


def test_a_crash_without_its_exit_line_is_the_invocation_the_state_names() -> None:
    """A restarted watcher sees a unit still in auto-restart (its exit lines read before): the same key as
    the exit line's, so the breaker does not count it again; after Restart=, the previous invocation."""
    restarting = parse_poll(_show("activating", "auto-restart", inv="inv1"), UNIT)
    assert crash_times(None, restarting, T0, 3600) == (CrashTime("inv1", T0),)
    running = parse_poll(_show(inv="inv1"), UNIT).observation
    restarted = parse_poll(_show(restarts=1, inv="inv2"), UNIT)
    assert crash_times(running, restarted, T0, 3600) == (CrashTime("inv1", T0),)
    nameless = parse_poll(_show("failed", "failed", inv=""), UNIT)
    assert crash_times(None, nameless, T0, 3600) == (CrashTime(f"seen@{T0:.3f}", T0),)


def test_a_crash_time_off_the_clock_is_clamped_to_the_poll() -> None:
    running = parse_poll(_show(), UNIT).observation
    ahead = parse_poll(_show("failed", "failed") + _journal(("c1", EXITED, T0 + 30, "inv1")), UNIT)
    (crash,) = crash_times(running, ahead, T0, 3600)
    assert crash.at == T0 and crash.key == "inv1" and "ahead of the poll" in (crash.clamped or "")
    assert crash_times(running, ahead, T0 + 29, 3600)[0].clamped is None  # within the skew allowed
    behind = parse_poll(_show("failed", "failed") + _journal(("c1", EXITED, T0 - 7200, "inv1")), UNIT)
    (old,) = crash_times(running, behind, T0, 3600)
    assert old.at == T0 and "more than 3600s before" in (old.clamped or "")
    assert crash.audit(True) == {"key": "inv1", "at": T0, "new": True, "clamped": crash.clamped}
