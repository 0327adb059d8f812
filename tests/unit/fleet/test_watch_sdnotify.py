"""systemd's notify protocol as the watcher speaks it, over a real AF_UNIX datagram socket: READY=1 before any
host is read; WATCHDOG=1 from the heartbeat only while the loop marks progress (a stuck loop is let die)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from remediate.api.watch import WatchRequest, watch
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.sdnotify import Heartbeat, kept_alive, sd_notify, watchdog_usec
from remediate.transport.base import SSHOptions
from tests.support.fake_transport import FakeTransport
from tests.support.hosts import watched_host
from tests.support.watch_fleet import Unit


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(10)
    try:
        yield sock
    finally:
        sock.close()


def _pending(sock: socket.socket) -> list[str]:
    """The datagrams already on the socket, without waiting."""
    got = []
    sock.setblocking(False)
    try:
        while True:
            got.append(sock.recv(4096).decode())
    except BlockingIOError:
        return got
    finally:
        sock.settimeout(10)


def test_watchdog_usec_is_ours_only() -> None:
    assert watchdog_usec({"WATCHDOG_USEC": "20000000"}, pid=7) == 20_000_000
    assert watchdog_usec({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "7"}, pid=7) == 20_000_000
    assert watchdog_usec({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "8"}, pid=7) is None, "our parent's"
    assert watchdog_usec({"WATCHDOG_USEC": "0"}, pid=7) is None
    assert watchdog_usec({"WATCHDOG_USEC": "soon"}, pid=7) is None
    assert watchdog_usec({}, pid=7) is None


def test_heartbeat_pings_while_the_loop_progresses_and_stops_when_it_is_stuck(
    notify_socket: socket.socket, tmp_path: Path
) -> None:
    path = str(tmp_path / "notify")
    beat = Heartbeat(400_000, send=lambda state: sd_notify(state, path))  # a tick every 0.1 s, stalled at 0.2 s
    assert (beat.every_s, beat.stall_s) == (0.1, 0.2)
    beat.start()
    try:
        assert notify_socket.recv(4096) == b"WATCHDOG=1", "at once"
        for _ in range(3):
            beat.alive()
            assert notify_socket.recv(4096) == b"WATCHDOG=1"
        # The loop stops marking itself: the pings stop (systemd then aborts it after WatchdogSec).
        _poll_until(lambda: beat.stalls >= 2)
        _pending(notify_socket)
        stalls = beat.stalls
        _poll_until(lambda: beat.stalls >= stalls + 3)
        assert _pending(notify_socket) == [], "no ping for a loop that is stuck"
        beat.alive()
        assert notify_socket.recv(4096) == b"WATCHDOG=1", "a loop that moves again is pinged for again"
    finally:
        beat.stop()


def test_kept_alive_marks_while_its_block_runs() -> None:
    import threading

    marks = threading.Semaphore(0)
    with kept_alive(marks.release, every_s=0.01):
        for _ in range(3):
            assert marks.acquire(timeout=10)
    with kept_alive(None):
        pass


def _poll_until(predicate: object, deadline: float = 10.0) -> None:
    import time

    end = time.monotonic() + deadline
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < end, "never happened"
        time.sleep(0.01)


def test_ready_is_sent_before_any_host_is_read(
    notify_socket: socket.socket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 hosts in the inventory: READY=1 is on the socket before the first host is dialled (it was sent only
    after the whole first round: every host's connection, one after another); then a heartbeat's ping."""
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    monkeypatch.setenv("WATCHDOG_USEC", "20000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.chdir(tmp_path)
    names = [f"gpu-{i:02d}" for i in range(20)]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {n: {"address": f"192.0.2.{i + 1}"} for i, n in enumerate(names)}}))
    seen: list[list[str]] = []

    def factory(entry: HostEntry, ssh: SSHOptions) -> FakeTransport:
        seen.append(_pending(notify_socket))  # what the socket held when this host was dialled
        unit = Unit(entry.name)
        return watched_host(entry.name, unit.answer)

    request = WatchRequest(targets=("all",), inventory=str(inventory), once=True, state_dir=str(tmp_path / "st"),
                           unit="sglang.service")  # fmt: skip
    assert watch(request, on_ready=lambda: sd_notify("READY=1"), transport_factory=factory) == 0  # type: ignore[arg-type]
    assert len(seen) == 20
    assert seen[0][:2] == ["READY=1", "WATCHDOG=1"], seen[0]
