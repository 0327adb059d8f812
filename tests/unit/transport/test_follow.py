"""``Transport.follow``: a long-lived command's output as bounded lines (channels.py ``Lines``), and the local
transport's follow on real bash processes (ssh.py's is exercised on the sandbox hosts by the watcher's e2e)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.errors import ConnectionLost
from remediate.transport.base import MAX_FOLLOW_LINE_BYTES, MAX_FOLLOW_LINES
from remediate.transport.channels import Lines
from remediate.transport.local import LocalTransport


def test_lines_are_split_across_pieces_and_a_long_one_is_cut() -> None:
    lines = Lines(8)
    lines.feed(b"ab")
    lines.feed(b"c\nde")
    assert lines.take(10) == [b"abc"]
    lines.feed(b"fghijklmnop")  # past 8 bytes: cut, the rest dropped up to its newline
    lines.feed(b"qrs\nxy\n\n")
    assert lines.take(10) == [b"defghijk", b"xy", b""]
    lines.feed(b"1\n2\n3\n")
    assert lines.take(2) == [b"1", b"2"] and lines.take(2) == [b"3"]


@pytest.fixture
def transport() -> Iterator[LocalTransport]:
    t = LocalTransport("here", require_root=False)
    yield t
    t.close()


def _until(followed: object, n: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        got += followed.lines(0.2)  # type: ignore[attr-defined]
    return got


def test_local_follow_reads_lines_as_they_come_bounded(transport: LocalTransport) -> None:
    big = MAX_FOLLOW_LINE_BYTES * 3
    command = f"echo one; head -c {big} /dev/zero | tr '\\0' x; echo; printf '\\xff\\xfe\\n'; seq 1 3000; exec sleep 60"
    with transport.follow(command) as followed:
        got = _until(followed, 3003)
        assert got[0] == b"one" and got[1] == b"x" * MAX_FOLLOW_LINE_BYTES and got[2] == b"\xff\xfe"
        assert got[3:] == [str(i).encode() for i in range(1, 3001)]
        assert followed.lines(0.05) == [], "silent: nothing, no error"


def test_no_call_returns_more_than_the_bound(transport: LocalTransport) -> None:
    with transport.follow(f"seq 1 {MAX_FOLLOW_LINES * 3}; exec sleep 60") as followed:
        sizes = []
        while sum(sizes) < MAX_FOLLOW_LINES * 3:
            sizes.append(len(followed.lines(5)))
        assert max(sizes) <= MAX_FOLLOW_LINES


def test_a_command_that_ends_is_connection_lost(transport: LocalTransport) -> None:
    with transport.follow("echo last") as followed:
        assert _until(followed, 1) == [b"last"]
        with pytest.raises(ConnectionLost, match="ended"):
            for _ in range(100):
                followed.lines(1)


def test_leaving_the_context_ends_the_command(transport: LocalTransport, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with transport.follow(f"echo $$ > {pid_file}; echo go; exec sleep 600") as followed:
        _until(followed, 1)
        pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
