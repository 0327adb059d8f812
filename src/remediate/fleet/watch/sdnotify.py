"""systemd's sd_notify, the tiny stdlib way (sd_notify(3); a datagram to $NOTIFY_SOCKET, an abstract socket
when it starts with '@'): READY=1 once the watcher can serve (its state opened, its policy valid: before any
host is read), WATCHDOG=1 from a heartbeat thread while the loop makes progress, STOPPING=1 on the way out.
Without NOTIFY_SOCKET it does nothing.

Why a thread that pings only on progress: the loop never blocks on a fix (fixes run on their own threads,
fleet/watch/loop.py), but one step of a round (a host's connect, its poll, a diagnosis) takes up to tens of
seconds, each bounded by its own timeout. Pinging at the end of each round would let a slow round (20 hosts,
some unreachable) overrun WatchdogSec; pinging unconditionally from a thread would keep a hung loop alive
for ever, which is what the watchdog is there to catch. So the loop marks ``alive()`` at every step (each
host polled, each second of its pause), and the heartbeat sends WATCHDOG=1 every quarter of WATCHDOG_USEC
only if the loop marked itself within half of it: a loop stuck in one step stops the pings, and systemd
(service.c, ``service_dispatch_watchdog``) aborts it at most 1.5 × WatchdogSec after its last mark. systemd
watches only in the running states (``service_set_state`` stops the watchdog on the way to stop): the
SIGTERM path (a fix in flight finishing, up to --wait-timeout) is bounded by TimeoutStopSec instead."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager


def sd_notify(state: str, socket_path: str | None = None) -> bool:
    """Send ``state`` (``READY=1`` …); False when not run under systemd's notify protocol or on error."""
    path = socket_path if socket_path is not None else os.environ.get("NOTIFY_SOCKET", "")
    if not path.startswith(("/", "@")):
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), address)
    except OSError:
        return False
    return True


def watchdog_usec(env: Mapping[str, str] | None = None, pid: int | None = None) -> int | None:
    """WATCHDOG_USEC when the watchdog is asked of this process (sd_watchdog_enabled(3): a positive
    integer, and WATCHDOG_PID, when set, is our PID), else None."""
    env = os.environ if env is None else env
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    owner = env.get("WATCHDOG_PID")
    if usec <= 0 or (owner is not None and owner != str(os.getpid() if pid is None else pid)):
        return None
    return usec


class Heartbeat:
    """WATCHDOG=1 every quarter of ``usec`` while ``alive()`` was called within half of it."""

    def __init__(self, usec: int, send: Callable[[str], bool] = sd_notify) -> None:
        self.every_s = usec / 4e6
        self.stall_s = usec / 2e6
        self.send = send
        self.stalls = 0  # ticks skipped because the loop had not marked itself alive
        self._alive_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch-heartbeat", daemon=True)

    @classmethod
    def from_env(cls) -> Heartbeat | None:
        usec = watchdog_usec()
        return None if usec is None or not os.environ.get("NOTIFY_SOCKET") else cls(usec)

    def alive(self) -> None:
        """The loop made progress (any thread may call it)."""
        self._alive_at = time.monotonic()

    def start(self) -> None:
        self.send("WATCHDOG=1")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.every_s + 1)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            if time.monotonic() - self._alive_at < self.stall_s:
                self.send("WATCHDOG=1")
            else:
                self.stalls += 1


@contextmanager
def kept_alive(alive: Callable[[], None] | None, every_s: float = 1.0) -> Iterator[None]:
    """``alive()`` every ``every_s`` from a thread while the block runs: a bounded step that holds the loop
    longer than the watchdog's half (a recovery's re-run of a fix) counts as progress. None: nothing."""
    if alive is None:
        yield
        return
    done = threading.Event()

    def tick() -> None:
        while not done.wait(every_s):
            alive()

    thread = threading.Thread(target=tick, name="watch-kept-alive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
