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
from tests.support.fake_transport import FakeTransport


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
        # a wake per second of the flood at most (3 when it fits in one second, more when a loaded machine
        # spreads it over several): never one per line
        assert 3 <= len(wakes.hosts) <= 6, wakes.hosts
        assert "journalctl -u sglang.service -f -n 0 -o json" in transport.followed[0]
    finally:
        follower.stop()


class HeldBackoff(threading.Event):
    """The follower's stop event whose timed waits (its backoff) are recorded and held until the stop: the retry
    is seen to wait for its backoff without the test racing the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.backoffs: list[float] = []
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            self.backoffs.append(timeout)
            self.waiting.set()
        return super().wait()


def test_a_channel_that_cannot_follow_wakes_its_host_and_backs_off() -> None:
    transport = FakeTransport(host="h1")  # nothing scripted: the command ends at once
    wakes = Wakes()
    follower = Follower(transport, "sglang.service", "h1", wakes)
    held = HeldBackoff()
    follower._stop = held
    follower.start()
    try:
        wakes.wait_for(1)
        assert held.waiting.wait(30), "the follower waits before it retries"
        assert not follower.is_following and follower.failures == 1
        assert held.backoffs == [2.0], "the first backoff is 2 s (then 4 … 60)"
        assert len(transport.followed) == 1, "no retry during the backoff"
    finally:
        follower.stop()
