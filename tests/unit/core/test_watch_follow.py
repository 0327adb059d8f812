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


@pytest.mark.parametrize(
    ("line", "told"),
    [
        (_line(_PID="1", MESSAGE="sglang.service: Scheduled restart job, restart counter is at 3."), True),
        (_line(SYSLOG_IDENTIFIER="systemd", MESSAGE="Started sglang.service."), True),
        (_line(_PID="77", MESSAGE="sglang.service: Main process exited, code=killed, status=9/KILL"), True),
        (_line(_PID="77", MESSAGE=list(b"Failed with result 'exit-code'.")), True),  # journald's binary MESSAGE
        (_line(_PID="77", MESSAGE="[2026-01-15 08:00:00] Decode batch. #running-req: 3"), False),
        (_line(_PID="77", MESSAGE="Main process exited, code=exited, status=0/SUCCESS"), False),
        (_line(_PID="77", MESSAGE=[300, 1]), False),  # not bytes: no message
        (FOLLOWING.encode(), False),
        (b'{"__CURSOR": "c1", "_PID": "1", "MESSAGE": "cut at the bou', False),
        (b"[1, 2]", False),
        (b"\xff\xfe{binary", False),
        (b"{" + b"x" * 100_000, False),
    ],
)
def test_only_systemds_lines_about_the_unit_wake_the_poll(line: bytes, told: bool) -> None:
    assert is_told(line) is told
