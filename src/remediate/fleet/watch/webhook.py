"""Notifications to a webhook: one JSON POST per notable event (decided, outcome, breaker) carrying the
event itself and a Slack-compatible ``text``; retried with backoff, each try bounded in time, the whole
bounded in tries. A webhook that stays down never stops the watcher: the audit log has every event."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from remediate.controller.watch_audit import masked
from remediate.errors import ConfigError

TRIES = 4
TIMEOUT_S = 5.0


def check_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--webhook {url!r}: an http:// or https:// URL")
    return url


def summary(event: dict[str, Any]) -> str:
    """The one line a person reads in the channel."""
    host = event.get("host", "fleet")
    kind = event.get("event")
    if kind == "decided":
        return f"remediate watch: {host}: {event.get('verdict')}: {event.get('reason')}"
    if kind == "outcome":
        return f"remediate watch: {host}: fix {event.get('outcome')} (tokens {event.get('tokens')})"
    return f"remediate watch: {kind}: {event.get('reason', '')}"


def post_event(url: str, event: dict[str, Any], *, sleep: Callable[[float], None] = time.sleep) -> bool:
    """POST the event; True once a 2xx came back, False after the last try."""
    body = json.dumps(masked({"text": summary(event), "event": event}), default=str).encode()
    for attempt in range(TRIES):
        request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 - checked scheme
                if 200 <= answer.status < 300:
                    return True
        except (urllib.error.URLError, OSError, ValueError):
            pass
        if attempt + 1 < TRIES:
            sleep(0.5 * 2**attempt)
    return False
