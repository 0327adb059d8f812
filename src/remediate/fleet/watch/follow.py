"""One host's followed journal: a thread holding ``journalctl -f`` on one channel of the host's kept
connection (``Transport.follow``); a line of systemd's about the unit wakes the watcher, which polls that
host at once. A channel that dies (or cannot start) is started again with a capped backoff; meanwhile the
host is polled every ``--interval`` as if it were not followed (the poll is the fallback).

Bounded whatever the host sends (its output is untrusted): lines cut at the transport's bound, at most
``MAX_LINES_PER_S`` parsed a second (past it the host is polled instead: the poll reads the journal
itself, bounded), nothing kept but the current line.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from remediate.core.watch.follow import FOLLOWING, MAX_LINES_PER_S, follow_command, is_told
from remediate.errors import TransportError
from remediate.transport.base import Transport

MAX_FOLLOW_BACKOFF_S = 60.0
READ_S = 2.0  # how often the thread looks at its stop flag while the channel is silent


class Follower:
    """``wake(host)`` is called from the follower's thread (it must be thread-safe)."""

    def __init__(self, transport: Transport, unit: str, host: str, wake: Callable[[str], None]) -> None:
        self.transport, self.unit, self.host, self.wake = transport, unit, host, wake
        self.is_following = False
        self.failures = 0
        self.lines = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"follow-{host}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def ask_stop(self) -> None:
        """Stop at the next line or read timeout (``READ_S``), or at once when the connection is closed."""
        self._stop.set()

    def stop(self, within: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(within)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self.transport.follow(follow_command(self.unit)) as followed:
                    self._read(followed.lines)
            except TransportError:
                pass
            self.is_following = False
            if self._stop.is_set():
                return
            self.failures += 1
            self.wake(self.host)  # polled at once: what the dead channel may have missed
            self._stop.wait(min(MAX_FOLLOW_BACKOFF_S, 2.0**self.failures))

    def _read(self, lines: Callable[[float], list[bytes]]) -> None:
        second, parsed = int(time.monotonic()), 0
        while not self._stop.is_set():
            got = lines(READ_S)
            if not self.is_following and got:
                self.is_following, self.failures = True, 0  # its first line is the marker: it follows now
                self.wake(self.host)  # the poll after the follow started covers what came before it
                got = got[1:] if got[0].strip() == FOLLOWING.encode() else got
            now = int(time.monotonic())
            if now != second:
                second, parsed = now, 0
            for line in got:
                self.lines += 1
                parsed += 1
                if parsed > MAX_LINES_PER_S:  # a flood: not parsed; the host is polled (once a second)
                    if parsed == MAX_LINES_PER_S + 1:
                        self.wake(self.host)
                    continue
                if is_told(line, self.unit):
                    self.wake(self.host)
