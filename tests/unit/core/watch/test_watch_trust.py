"""What counts as a crash, on real journals (tests/data/watch_journal, captured from a sandbox host's systemd
252 by its capture.py): an exit after systemd's stop job is planned, whoever asked; an exit systemd did not
ask for is a crash; only PID 1's lines (journald's trusted ``_PID``) about the unit are systemd's word."""

from __future__ import annotations

import json
from pathlib import Path

from remediate.core.watch.detect import (
    STOPS_MARK,
    UNIT_STOPPING,
    crash_exits,
    crash_reason,
    crash_times,
    exit_lines,
    parse_poll,
    poll_command,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "watch_journal"
UNIT = "sglang.service"
RUNNING = "ActiveState=active\nSubState=running\nResult=success\nNRestarts=0\nInvocationID={inv}\nExecMainStatus=0\n"


def _journal(name: str) -> list[str]:
    return (DATA / f"{name}.jsonl").read_text().splitlines()


def _show(name: str) -> str:
    return (DATA / f"{name}.show").read_text()


def _stops(lines: list[str]) -> list[str]:
    """What the poll's look-back (``journalctl _PID=1 UNIT=… MESSAGE_ID=<stopping>``) reads of this journal."""
    out = []
    for line in lines:
        doc = json.loads(line)
        if doc.get("_PID") == "1" and doc.get("UNIT") == UNIT and doc.get("MESSAGE_ID") == UNIT_STOPPING:
            out.append(line)
    return out


def _poll_text(show: str, lines: list[str], history: list[str] | None = None) -> str:
    """A poll's answer: the show, the journal lines after its cursor, the stop-job look-back over
    ``history`` (everything the host's journal holds by then: the lines before the cursor too)."""
    return show + "@@journal\n" + "\n".join(lines) + f"\n{STOPS_MARK}\n" + "\n".join(_stops(history or lines))


def _invocation(line: str) -> str:
    return str(json.loads(line).get("INVOCATION_ID") or json.loads(line).get("_SYSTEMD_INVOCATION_ID"))


def _first_running(lines: list[str]) -> str:
    started = next(line for line in lines if "Started sglang.service" in line)
    return RUNNING.format(inv=_invocation(started))


def test_the_poll_reads_pid1s_stop_jobs_of_the_unit() -> None:
    command = poll_command("sglang", "s=1;i=2", None)
    assert f"echo {STOPS_MARK}; journalctl _PID=1 UNIT=sglang.service MESSAGE_ID={UNIT_STOPPING}" in command
    assert "-n 8" in command.split(STOPS_MARK)[1]
    assert "'UNIT=a b.service'" in poll_command("a b", None, None)


def test_a_restart_of_a_self_sigkilling_sglang_is_no_crash() -> None:
    """sglang 0.5.6 stopped by ``systemctl restart``: Main process exited, code=killed, status=9/KILL and
    Failed with result 'signal' after systemd's "Stopping …" (JOB_TYPE=stop) of the same invocation."""
    lines = _journal("restart")
    poll = parse_poll(_poll_text(_show("restart"), lines), UNIT)
    assert exit_lines(poll.entries), "systemd's exit lines are there"
    assert crash_exits(poll) == ()
    before = parse_poll(_first_running(lines), UNIT).observation
    assert crash_reason(before, poll) is None and crash_reason(None, poll) is None


def test_the_stop_job_and_the_exit_in_different_polls() -> None:
    """The cursor falls between "Stopping …" and the exit line (or a watcher restarted there): the second
    poll reads the exit only, and the stop job through the look-back."""
    lines = _journal("restart")
    cut = next(i for i, line in enumerate(lines) if UNIT_STOPPING in line) + 1
    first = parse_poll(_poll_text(_first_running(lines), lines[:cut]), UNIT)
    second = parse_poll(_poll_text(_show("restart"), lines[cut:], lines), UNIT)
    assert crash_reason(first.observation, first) is None
    assert exit_lines(second.entries) and crash_reason(first.observation, second) is None
    assert crash_reason(None, second) is None  # a watcher started between the two
    # Without the look-back, the same second poll is a crash: the look-back is what tells it.
    blind = parse_poll(_poll_text(_show("restart"), lines[cut:], []), UNIT)
    assert crash_reason(first.observation, blind)


def test_a_stop_that_leaves_the_unit_failed_then_a_start_is_no_crash() -> None:
    """``systemctl stop``: the unit failed, Result=signal, for a stop systemd ran; then ``start``."""
    stopped = _journal("stopped")
    show = _show("stopped")
    assert "ActiveState=failed" in show and "Result=signal" in show
    before = parse_poll(_first_running(stopped), UNIT).observation
    down = parse_poll(_poll_text(show, stopped), UNIT)
    assert crash_reason(before, down) is None
    assert crash_reason(None, down) is None  # a watcher that first sees the unit failed after the stop
    assert crash_reason(down.observation, parse_poll(_poll_text(show, [], stopped), UNIT)) is None
    lines = _journal("stop_start")
    up = parse_poll(_poll_text(_show("stop_start"), lines[len(stopped) :], lines), UNIT)
    assert crash_reason(down.observation, up) is None


def test_a_real_crash_is_still_a_crash() -> None:
    """The 32k prefill's OOM: the same SIGKILL lines with no stop job before them, then Restart=on-failure's
    own restart job ("Scheduled restart job", then "Stopped …" with JOB_TYPE=restart *after* the exit)."""
    lines = _journal("crash")
    assert any('"JOB_TYPE":"restart"' in line.replace(" ", "") for line in lines)
    before = parse_poll(_first_running(lines), UNIT).observation
    poll = parse_poll(_poll_text(_show("crash"), lines), UNIT)
    assert "NRestarts 0 → 1" in (crash_reason(before, poll) or "")
    (crash,) = crash_times(before, poll, 2e9, 1e9)
    assert crash.key == _invocation(next(line for line in lines if "status=9/KILL" in line))


def test_a_crash_right_after_a_planned_restart_is_a_crash() -> None:
    """The restart's exit is planned; the new invocation dying on its own (no stop job of its own) is not."""
    lines = _journal("restart")
    new_inv = _invocation([line for line in lines if "Started sglang.service" in line][-1])
    crash = [line for line in _journal("crash") if json.loads(line).get("_PID") == "1" and "Main process" in line]
    again = json.loads(crash[0]) | {"INVOCATION_ID": new_inv, "__CURSOR": "s=z;i=ffffff"}
    poll = parse_poll(_poll_text(_show("restart"), [*lines, json.dumps(again)]), UNIT)
    assert [e.invocation for e in crash_exits(poll)] == [new_inv]
    assert crash_reason(parse_poll(_first_running(lines), UNIT).observation, poll)


def test_a_stop_job_after_the_exit_does_not_excuse_it() -> None:
    """A unit crashed, then a person stopped it while it waited to restart: the stop came after the exit."""
    lines = _journal("crash")
    exit_at = next(i for i, line in enumerate(lines) if "status=9/KILL" in line and '"_PID":"1"' in line)
    stop = next(line for line in _journal("restart") if UNIT_STOPPING in line)
    doc = json.loads(lines[exit_at])
    late = json.loads(stop) | {"INVOCATION_ID": doc["INVOCATION_ID"], "__CURSOR": doc["__CURSOR"] + "0"}
    seq = int(doc["__CURSOR"].split(";i=")[1].split(";")[0], 16) + 5
    late["__CURSOR"] = doc["__CURSOR"].replace(doc["__CURSOR"].split(";i=")[1].split(";")[0], f"{seq:x}")
    poll = parse_poll(_poll_text(_show("crash"), [*lines, json.dumps(late)]), UNIT)
    assert crash_exits(poll), "the exit came first: a crash"


def test_the_servers_words_are_never_systemds() -> None:
    """A request quoting systemd (``--log-requests``'s ``Receive: obj=GenerateReqInput(text=…)``) and a line
    the service wrote with SYSLOG_IDENTIFIER=systemd, UNIT=, a stop job's MESSAGE_ID and JOB_TYPE, and a
    _PID=1 that journald replaced with its own: none is systemd's word, none a crash or a stop job."""
    lines = _journal("spoof")
    spoof = [json.loads(line) for line in lines if json.loads(line).get("SYSLOG_IDENTIFIER") == "systemd"]
    assert spoof and all(d["_PID"] != "1" and d["UNIT"] == UNIT for d in spoof if d.get("_COMM") != "systemd")
    assert any("Receive: obj=GenerateReqInput(text=" in line and "status=9/KILL" in line for line in lines)
    poll = parse_poll(_poll_text(_show("spoof"), lines), UNIT)
    assert exit_lines(poll.entries) == () and poll.stops == ()
    assert crash_reason(None, poll) is None
    assert not [e for e in poll.entries if e.is_systemd and "status=9/KILL" in e.message]
