"""The watcher's webhook: a real HTTP receiver on loopback; retried until a 2xx, bounded in tries."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from remediate.errors import ConfigError
from remediate.fleet.watch.webhook import TRIES, check_url, post_event

if TYPE_CHECKING:
    from tests.support.webhook import Hook


def test_posts_json_with_slack_text_and_masks(hook: Hook) -> None:
    event = {"event": "decided", "host": "gpu-1", "verdict": "act", "reason": "api_key=sk-secret123456"}
    assert post_event(hook.url, event, sleep=lambda _: None)
    body = hook.bodies[0]
    assert str(body["text"]).startswith("remediate watch: gpu-1: act")
    assert "sk-secret123456" not in json.dumps(body)


def test_retries_then_gives_up(hook: Hook) -> None:
    waits: list[float] = []
    hook.failures = 2
    assert post_event(hook.url, {"event": "breaker", "reason": "x"}, sleep=waits.append)
    assert len(hook.bodies) == 3 and waits == [0.5, 1.0]
    hook.bodies, hook.failures = [], 99
    assert not post_event(hook.url, {"event": "breaker", "reason": "x"}, sleep=waits.append)
    assert len(hook.bodies) == TRIES


def test_only_http_urls() -> None:
    with pytest.raises(ConfigError, match="--webhook 'file:///etc/passwd'"):
        check_url("file:///etc/passwd")
