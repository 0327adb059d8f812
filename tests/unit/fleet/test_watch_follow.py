"""A host's follower (fleet/watch/follow.py) over a scripted channel: the marker starts it, a flood of the
server's lines is not parsed past the rate bound (the host is polled instead), a channel that ends or cannot
start wakes the host (the poll is the fallback) and is retried with backoff."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable

from remediate.core.watch.follow import FOLLOWING
from remediate.fleet.watch.follow import Follower
from tests.fake_transport import FakeTransport


class Wakes:
    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.changed = threading.Condition()

    def __call__(self, host: str) -> None:
        with self.changed:
            self.hosts.append(host)
            self.changed.notify_all()

    def wait_for(self, n: int, also: Callable[[], bool] = lambda: True) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.hosts) >= n and also(), 30), self.hosts


def _server(i: int) -> bytes:
    return json.dumps({"__CURSOR": f"c{i}", "_PID": "77", "MESSAGE": f"Decode batch {i}"}).encode()


def test_a_flood_of_the_servers_lines_wakes_the_poll_instead_of_being_parsed() -> None:
    transport = FakeTransport(host="h1")
    flood = [_server(i) for i in range(5000)]
    transport.follow_script = deque([[FOLLOWING.encode()], [_server(-1)], flood[:2500], flood[2500:]])
    wakes = Wakes()
    follower = Follower(transport, "sglang.service", "h1", wakes)
    follower.start()
    try:
        wakes.wait_for(3, lambda: follower.failures >= 1)  # the start, the flood, then the channel's end
        assert follower.lines == 5001, "every line after the marker counted, not every line parsed"
        # 3 when the flood fits in one second, 4 when it straddles two: never one per line
        assert len(wakes.hosts) in (3, 4)
        assert "journalctl -u sglang.service -f -n 0 -o json" in transport.followed[0]
    finally:
        follower.stop()


def test_a_channel_that_cannot_follow_wakes_its_host_and_backs_off() -> None:
    transport = FakeTransport(host="h1")  # nothing scripted: the command ends at once
    wakes = Wakes()
    follower = Follower(transport, "sglang.service", "h1", wakes)
    follower.start()
    try:
        wakes.wait_for(1)
        assert not follower.is_following and follower.failures >= 1
        assert len(transport.followed) == 1, "retried only after its backoff (2 s, then 4 … 60)"
    finally:
        follower.stop()
