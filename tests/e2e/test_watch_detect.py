"""The watcher's poll on a real sandbox host: healthy reads as no crash; the 32k prefill's crash is seen
after the cursor, with the OOM in the new journal entries; an unreadable host is unreachable, not crashed."""

from __future__ import annotations

import time

import pytest

from remediate.core.watch.detect import crash_reason
from remediate.core.watch.follow import FOLLOWING, follow_command, is_told
from remediate.host.watch.poll import poll_unit
from remediate.transport.base import SSHOptions
from remediate.transport.ssh import SSHTransport
from tests.support.node import UNIT, Node, poll

pytestmark = pytest.mark.e2e


def test_poll_sees_the_32k_crash_after_the_cursor(incident: Node) -> None:
    node = incident
    ssh = SSHTransport(node.host.name, SSHOptions(ssh_config=str(node.fleet.ssh_config)))
    try:
        first = poll_unit(ssh, UNIT, None, time.time() - 3600)
        assert first is not None and first.observation is not None
        assert first.observation.active == "active" and crash_reason(None, first) is None
        assert first.cursor, "the lookback read the unit's journal"
        before, cursor = first.observation, first.cursor
        restarts = before.n_restarts

        for seed in (1, 2):
            assert node.generate(2000, seed).status == 200
        assert node.generate(32768, 3).status is None, "the 32k prefill should kill the stand-in"

        def crashed() -> object:
            p = poll_unit(ssh, UNIT, cursor, None)
            return p if p is not None and crash_reason(before, p) else None

        seen = poll(crashed, deadline=30, what="the crash in a poll")
        assert seen.observation.is_down or seen.observation.n_restarts > restarts
        assert any("CUDA out of memory" in e.message for e in seen.entries)
        assert all(e.message != "" for e in seen.entries[:1])
    finally:
        ssh.close()


def test_unreadable_host_is_unreachable(incident: Node) -> None:
    ssh = SSHTransport(incident.host.name, SSHOptions(ssh_config=str(incident.fleet.ssh_config)))
    try:
        assert poll_unit(ssh, "no-such-unit-at-all.service", None, None) is not None  # systemd answers for it
        ssh.close()
        bad = SSHTransport("127.42.255.254", SSHOptions(ssh_config=str(incident.fleet.ssh_config), connect_timeout=2))
        assert poll_unit(bad, UNIT, None, None) is None
        bad.close()
    finally:
        ssh.close()


def test_the_followed_journal_tells_the_crash_and_ends_with_its_channel(incident: Node) -> None:
    """``journalctl -f`` on one channel of the kept SSH connection: the 32k prefill's crash comes as systemd's
    line (is_told), the server's own lines do not; leaving the context ends journalctl on the host."""
    node = incident
    ssh = SSHTransport(node.host.name, SSHOptions(ssh_config=str(node.fleet.ssh_config)))
    following = "pgrep -xc journalctl || true"
    try:
        with ssh.follow(follow_command(UNIT)) as followed:
            assert poll(lambda: followed.lines(1) or None, deadline=30, what="the marker") == [FOLLOWING.encode()]
            assert ssh.run(following).stdout.strip() == "1"
            assert node.generate(2000, 1).status == 200
            assert node.generate(32768, 3).status is None, "the 32k prefill should kill the stand-in"
            seen: list[bytes] = []

            def exit_told() -> object:
                seen.extend(followed.lines(1))
                told = [line for line in seen if is_told(line, UNIT)]
                return told if any(b"Main process exited" in t or b"Failed with result" in t for t in told) else None

            lines = poll(exit_told, deadline=30, what="systemd's line about the crash")
            # The engine's fatal line (torch's OOM) wakes the watcher too, to be confirmed; the server's other
            # lines (the traceback, its requests) came and woke nothing.
            assert any(b"out of memory" in line.lower() for line in lines), lines
            assert any(not is_told(line, UNIT) for line in seen), "the server's own lines came too, and woke nothing"
        assert poll(lambda: ssh.run(following).stdout.strip() == "0" or None, deadline=30, what="journalctl gone")
    finally:
        ssh.close()
