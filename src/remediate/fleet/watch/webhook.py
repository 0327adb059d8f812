"""Notifications to a webhook: one JSON POST per notable event (decided, outcome, breaker) carrying the
event itself and a Slack-compatible ``text``. Posts leave the watcher's loop: a bounded queue drained by one
thread, each post bounded by a total deadline (its connect, send, the answer and its retries together, not
per socket operation: a trickling or black-holed endpoint holds only that thread, and only that long); past
``limit`` pending, an event is dropped, counted and said in the audit. The audit log has every event."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remediate.controller.watch_audit import append_event, masked
from remediate.errors import ConfigError

TRIES = 4
TIMEOUT_S = 5.0  # one try's bound (within the post's deadline)
DEADLINE_S = 15.0  # one post, every try and wait included
PENDING = 100  # events queued for the webhook at most; past it, dropped (counted, audited)


def check_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--webhook {shown_url(url)!r}: an http:// or https:// URL")
    return url


def shown_url(url: str) -> str:
    """The URL as it may be printed: no userinfo, no query, and only the path's first segment (Slack's
    ``/services/T…/B…/SECRET``, Discord's ``/api/webhooks/ID/TOKEN``: the token is in the path)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    first, _, rest = parts.path.lstrip("/").partition("/")
    path = f"/{first}" + ("/***" if rest else "") if first else ""
    return f"{parts.scheme}://{host}{path}" + ("?***" if parts.query else "")


def summary(event: dict[str, Any]) -> str:
    """The one line a person reads in the channel."""
    host = event.get("host", "fleet")
    kind = event.get("event")
    if kind == "decided":
        return f"remediate watch: {host}: {event.get('verdict')}: {event.get('reason')}"
    if kind == "outcome":
        return f"remediate watch: {host}: fix {event.get('outcome')} (tokens {event.get('tokens')})"
    return f"remediate watch: {kind}: {event.get('reason', '')}"


def post_event(
    url: str,
    event: dict[str, Any],
    *,
    sleep: Callable[[float], object] = time.sleep,
    deadline_s: float = DEADLINE_S,
    cancel: threading.Event | None = None,
) -> bool:
    """POST the event; True once a 2xx came back, False after the last try, past ``deadline_s`` in all, or
    once ``cancel`` is set (the watcher stopping)."""
    body = json.dumps(masked({"text": summary(event), "event": event}), default=str).encode()
    deadline = time.monotonic() + deadline_s
    for attempt in range(TRIES):
        if _post_once(url, body, min(deadline, time.monotonic() + TIMEOUT_S), cancel or threading.Event()):
            return True
        wait = 0.5 * 2**attempt
        if attempt + 1 == TRIES or time.monotonic() + wait >= deadline or (cancel is not None and cancel.is_set()):
            return False
        sleep(wait)
    return False


def _post_once(url: str, body: bytes, deadline: float, cancel: threading.Event) -> bool:
    """One POST, cut at ``deadline`` (or ``cancel``) whatever the endpoint does: a guard shuts the socket down,
    which ends a read or write blocked on a peer that trickles its answer a byte at a time (each under the
    socket's own timeout) or never answers."""
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn = kind(parts.hostname or "", parts.port, timeout=left)
    except (ValueError, http.client.InvalidURL):
        return False
    finished = threading.Event()
    guard = threading.Thread(target=_guard, args=(conn, deadline, cancel, finished), daemon=True)
    guard.start()
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read(65536)  # bounded: the answer's body is not needed
        return 200 <= answer.status < 300 and time.monotonic() < deadline
    except (OSError, http.client.HTTPException, ValueError):
        return False
    finally:
        finished.set()
        guard.join()
        conn.close()


def _guard(
    conn: http.client.HTTPConnection, deadline: float, cancel: threading.Event, finished: threading.Event
) -> None:
    """The post's bound: its socket shut down at the deadline or on ``cancel``, unless it finished first."""
    while not finished.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
        if cancel.is_set() or time.monotonic() >= deadline:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            return


class WebhookQueue:
    """The webhook's posts off the loop: ``put`` never blocks (past ``limit`` pending, the event is dropped,
    counted in ``dropped`` and handed to ``on_drop`` for the audit); one daemon thread posts them in order,
    each within ``deadline_s``. ``close`` gives the queue ``grace_s`` to drain, then cuts the post in flight."""

    def __init__(
        self,
        url: str,
        *,
        limit: int = PENDING,
        deadline_s: float = DEADLINE_S,
        on_drop: Callable[[dict[str, Any], int], None] | None = None,
    ) -> None:
        self.url, self.limit, self.deadline_s, self.on_drop = url, limit, deadline_s, on_drop
        self.dropped = 0
        self.posted = 0
        self.failed = 0
        self._pending: deque[dict[str, Any]] = deque()
        self._busy = False
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="watch-webhook", daemon=True)
        self._thread.start()

    def put(self, event: dict[str, Any]) -> None:
        with self._cond:
            full = len(self._pending) >= self.limit
            if full:
                self.dropped += 1
            else:
                self._pending.append(event)
                self._cond.notify_all()
        if full and self.on_drop is not None:
            self.on_drop(event, self.dropped)

    def pending(self) -> int:
        with self._cond:
            return len(self._pending) + (1 if self._busy else 0)

    def close(self, grace_s: float = 0.0) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._pending and not self._busy, timeout=grace_s)
            self._stop.set()
            self._cond.notify_all()
        self._thread.join(timeout=self.deadline_s + 1)

    def _drain(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stop.is_set())
                if self._stop.is_set():
                    return
                event = self._pending.popleft()
                self._busy = True
            try:
                ok = post_event(self.url, event, sleep=self._stop.wait, deadline_s=self.deadline_s, cancel=self._stop)
            finally:
                with self._cond:
                    self._busy = False
                    self.posted, self.failed = self.posted + ok, self.failed + (not ok)
                    self._cond.notify_all()


def audit_dropped(directory: Path, url: str, event: dict[str, Any], dropped: int) -> None:
    """An event the webhook's queue had no room for, said in the audit (the event itself is there already)."""
    record = {"event": "webhook_dropped", "at": time.time(), "webhook": shown_url(url), "dropped": dropped}
    append_event(directory, {**record, "dropped_event": event.get("event"), "host": event.get("host")})
