"""The followed journal's pure part: the command, and which lines are systemd's word about the unit."""

from __future__ import annotations

import json

import pytest

from remediate.core.watch.follow import FOLLOWING, follow_command, is_told


def test_the_command_follows_the_unit_from_now_and_ends_with_its_stdin() -> None:
    command = follow_command("sglang a;b.service")
    assert "journalctl -u 'sglang a;b.service' -f -n 0 -o json" in command
    assert f"echo {FOLLOWING}" in command and "(cat >/dev/null; kill $f 2>/dev/null) <&0 &" in command


def _line(**fields: object) -> bytes:
    return json.dumps({"__CURSOR": "c1", **fields}).encode()


SYSTEMD = {"_PID": "1", "_COMM": "systemd", "UNIT": "sglang.service"}


@pytest.mark.parametrize(
    ("line", "told"),
    [
        (_line(**SYSTEMD, MESSAGE="sglang.service: Scheduled restart job, restart counter is at 3."), True),
        (_line(**SYSTEMD, MESSAGE="Stopping sglang.service - SGLang server..."), True),
        (_line(**SYSTEMD, MESSAGE=list(b"sglang.service: Failed with result 'signal'.")), True),  # binary MESSAGE
        # PID 1 about another unit (journalctl -u never shows it; a followed line that says so is not ours)
        (_line(_PID="1", UNIT="other.service", MESSAGE="other.service: Failed with result 'signal'."), False),
        # any client may set SYSLOG_IDENTIFIER, UNIT, MESSAGE_ID, JOB_TYPE: only journald's _PID counts
        (_line(SYSLOG_IDENTIFIER="systemd", UNIT="sglang.service", MESSAGE="Started sglang.service."), False),
        (_line(_PID="77", MESSAGE="sglang.service: Main process exited, code=killed, status=9/KILL"), False),
        (
            _line(_PID="77", SYSLOG_IDENTIFIER="systemd", UNIT="sglang.service", MESSAGE="Failed with result 'x'."),
            False,
        ),
        (_line(_PID="77", MESSAGE=list(b"Failed with result 'exit-code'.")), False),
        (_line(_PID="77", MESSAGE="[2026-01-15 08:00:00] Decode batch. #running-req: 3"), False),
        (FOLLOWING.encode(), False),
        (b'{"__CURSOR": "c1", "_PID": "1", "MESSAGE": "cut at the bou', False),
        (b"[1, 2]", False),
        (b"\xff\xfe{binary", False),
        (b"{" + b"x" * 100_000, False),
    ],
)
def test_only_systemds_lines_about_the_unit_wake_the_poll(line: bytes, told: bool) -> None:
    assert is_told(line, "sglang") is told  # the unit as named: journalctl -u sglang is sglang.service
