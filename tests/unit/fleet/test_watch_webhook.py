"""The watcher's webhook: a real HTTP receiver on loopback; retried until a 2xx, bounded in tries."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from remediate.controller.watch_audit import read_events
from remediate.errors import ConfigError
from remediate.fleet.watch.webhook import TRIES, WebhookQueue, audit_dropped, check_url, post_event, shown_url

if TYPE_CHECKING:
    from tests.support.clock import Naps
    from tests.support.webhook import Hook


def test_posts_json_with_slack_text_and_masks(hook: Hook, naps: Naps) -> None:
    event = {"event": "decided", "host": "gpu-1", "verdict": "act", "reason": "api_key=sk-secret123456"}
    assert post_event(hook.url, event, sleep=naps)
    body = hook.bodies[0]
    assert str(body["text"]).startswith("remediate watch: gpu-1: act")
    assert "sk-secret123456" not in json.dumps(body)


def test_retries_then_gives_up(hook: Hook, naps: Naps) -> None:
    hook.failures = 2
    assert post_event(hook.url, {"event": "breaker", "reason": "x"}, sleep=naps)
    assert len(hook.bodies) == 3 and naps == [0.5, 1.0]
    hook.bodies, hook.failures = [], 99
    assert not post_event(hook.url, {"event": "breaker", "reason": "x"}, sleep=naps)
    assert len(hook.bodies) == TRIES


def test_only_http_urls() -> None:
    with pytest.raises(ConfigError, match=r"--webhook 'file:///etc/\*\*\*': an http"):
        check_url("file:///etc/passwd")


def test_the_urls_credentials_are_never_printed() -> None:
    with pytest.raises(ConfigError) as refused:
        check_url("hxxps://bot:hunter2@hooks.example/services/T0/B0/s3cr3tT0k3n?token=abc")
    assert "hunter2" not in str(refused.value) and "s3cr3tT0k3n" not in str(refused.value)
    assert "token=abc" not in str(refused.value) and "hooks.example" in str(refused.value)
    assert shown_url("https://u:p@hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com/services/***"
    assert shown_url("https://hook.example:8443/api?key=k1") == "https://hook.example:8443/api?***"
    assert shown_url("http://127.0.0.1:9") == "http://127.0.0.1:9"


class Endpoint:
    """A misbehaving HTTP endpoint on loopback: ``trickle`` answers 200 one byte every 50 ms (each read well
    under a socket timeout, the whole answer ~10 s); ``black_hole`` accepts and never reads or answers."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.accepted = 0
        self.sent = 0
        self.cut = threading.Event()  # the client went away before the whole answer was sent
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: " + b"." * 180 + b"\r\n\r\n"
        self.listener.settimeout(0.1)
        peers: list[socket.socket] = []
        while not self.done.is_set():
            try:
                peer, _ = self.listener.accept()
            except TimeoutError:
                continue
            peers.append(peer)
            self.accepted += 1
            if self.mode == "trickle":
                peer.recv(65536)
                try:
                    for byte in answer:
                        if self.done.wait(0.05):
                            break
                        peer.sendall(bytes([byte]))
                        self.sent += 1
                except OSError:
                    self.cut.set()
        for peer in peers:
            peer.close()

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.listener.close()


@pytest.fixture
def trickle() -> Iterator[Endpoint]:
    endpoint = Endpoint("trickle")
    yield endpoint
    endpoint.close()


@pytest.fixture
def black_hole() -> Iterator[Endpoint]:
    endpoint = Endpoint("black_hole")
    yield endpoint
    endpoint.close()


def test_a_trickling_endpoint_is_cut_at_the_posts_deadline(trickle: Endpoint, naps: Naps) -> None:
    """Each byte comes well within a socket timeout: only a deadline on the whole post ends it (a bound per
    socket operation would read the ~10 s answer to its end and call it a success)."""
    assert not post_event(trickle.url, {"event": "breaker", "reason": "x"}, sleep=naps, deadline_s=0.5)
    assert 0 < trickle.sent < 200, "the answer was cut midway"


def test_the_queue_never_holds_the_loop_and_drops_past_its_limit(black_hole: Endpoint) -> None:
    """A black-holed endpoint holds the queue's thread only: each put returns at once; past ``limit`` pending
    the event is dropped, counted and handed to the audit."""
    dropped: list[tuple[str, int]] = []
    queue = WebhookQueue(black_hole.url, limit=2, deadline_s=30, on_drop=lambda e, n: dropped.append((e["event"], n)))
    try:
        queue.put({"event": "decided", "n": 0})
        _until(lambda: black_hole.accepted == 1)  # the thread holds the first post, the endpoint silent
        for n in (1, 2, 3, 4):
            queue.put({"event": "outcome", "n": n})
        assert queue.pending() == 3 and queue.dropped == 2 and queue.posted == 0
        assert dropped == [("outcome", 1), ("outcome", 2)]
    finally:
        queue.close()
    assert not queue._thread.is_alive()


def test_the_queue_posts_in_order(hook: Hook) -> None:
    queue = WebhookQueue(hook.url)
    for n in range(3):
        queue.put({"event": "outcome", "host": f"gpu-{n}", "outcome": "remediated"})
    queue.close(grace_s=30)
    assert [b["event"]["host"] for b in hook.bodies] == ["gpu-0", "gpu-1", "gpu-2"] and queue.posted == 3


def test_a_dropped_event_is_said_in_the_audit_without_the_urls_secret(tmp_path: Path) -> None:
    audit_dropped(tmp_path, "https://u:pw@hooks.example/services/T/B/S3CR3T", {"event": "outcome", "host": "h1"}, 7)
    (record,) = read_events(tmp_path)
    assert record["event"] == "webhook_dropped" and record["dropped"] == 7 and record["host"] == "h1"
    assert "S3CR3T" not in json.dumps(record) and "pw" not in str(record["webhook"])


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    stop = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        stop.wait(0.02)
    raise AssertionError("condition not met")
