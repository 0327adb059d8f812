"""The watcher's webhook: a real HTTP receiver on loopback; retried until a 2xx, bounded in tries."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from remediate.errors import ConfigError
from remediate.fleet.watch.webhook import TRIES, check_url, post_event


class _Receiver(BaseHTTPRequestHandler):
    failures = 0
    bodies: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        if type(self).failures > 0:
            type(self).failures -= 1
            self.send_response(503)
        else:
            self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.bodies, _Receiver.failures = [], 0
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_posts_json_with_slack_text_and_masks(receiver: str) -> None:
    event = {"event": "decided", "host": "gpu-1", "verdict": "act", "reason": "api_key=sk-secret123456"}
    assert post_event(receiver, event, sleep=lambda _: None)
    body = _Receiver.bodies[0]
    assert str(body["text"]).startswith("remediate watch: gpu-1: act")
    assert "sk-secret123456" not in json.dumps(body)


def test_retries_then_gives_up(receiver: str) -> None:
    waits: list[float] = []
    _Receiver.failures = 2
    assert post_event(receiver, {"event": "breaker", "reason": "x"}, sleep=waits.append)
    assert len(_Receiver.bodies) == 3 and waits == [0.5, 1.0]
    _Receiver.bodies, _Receiver.failures = [], 99
    assert not post_event(receiver, {"event": "breaker", "reason": "x"}, sleep=waits.append)
    assert len(_Receiver.bodies) == TRIES


def test_only_http_urls() -> None:
    with pytest.raises(ConfigError, match="--webhook 'file:///etc/passwd'"):
        check_url("file:///etc/passwd")
