"""The watcher stays alive while it works, and detection never waits for a fix (issue 33): the CLI under a
real ``NOTIFY_SOCKET`` (an AF_UNIX datagram socket the test reads) with ``WATCHDOG_USEC=20000000`` and 20
hosts in its inventory (18 of them refuse the connection), one sandbox host whose fix waits for a 40 s load
(twice the watchdog interval: a watcher that stopped pinging while it fixes would be killed).
READY=1 comes before the first host is read; WATCHDOG=1 is never more than half of WATCHDOG_USEC apart,
through the whole fix; a crash on the other host meanwhile is detected, decided `wait` and shown waiting in
`watch status`, then fixed once the first fix ended."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from sandbox import Sandbox
from sandbox.units import free_port
from tests.support.fleet import write_inventory
from tests.support.node import FAST_KNOBS, Node, _cli_env, poll, remediate_argv

pytestmark = pytest.mark.e2e
LOAD_S = 40.0
WATCHDOG_USEC = 20_000_000


class _Notified:
    """Every datagram on a bound AF_UNIX socket, with its arrival time (monotonic), read by a thread."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.5)
        self.got: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.got.append((time.monotonic(), data.decode()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()

    def times(self, state: str) -> list[float]:
        return [t for t, s in self.got if state in s.split("\n")]


def _events(state: Path) -> list[dict[str, object]]:
    path = state / "watch-audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _crash(node: Node) -> None:
    for seed in (1, 2):
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None
    poll(lambda: any("Main process exited" in line for line in node.journal()), deadline=20, what="the exit")


def test_alive_through_a_40s_fix_and_a_crash_elsewhere_is_detected_meanwhile(
    sandbox_fleet: Sandbox, fresh_hosts, tmp_path: Path
) -> None:
    nodes = [Node(sandbox_fleet, h, tmp_path, free_port(h.address)) for h in fresh_hosts(2)]
    for node in nodes:
        node.host.set_standin(**FAST_KNOBS)
        node.install_incident()
    slow, other = nodes
    # The fix's restart reads this: a load of LOAD_S wall seconds (the scale's 450 s load is 0.45 s).
    slow.host.set_standin(**{**FAST_KNOBS, "load_s": LOAD_S / float(FAST_KNOBS["time_scale"])})
    inventory = write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, [n.host for n in nodes])
    document = yaml.safe_load(inventory.read_text())
    closed = free_port("127.0.0.1")  # nothing listens: each of these 18 hosts refuses the connection
    for i in range(18):
        document["hosts"][f"gone-{i:02d}"] = {"address": "127.0.0.1", "port": closed}
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    state = tmp_path / "watch-state"
    notified = _Notified(tmp_path / "notify")
    env = {**_cli_env(), "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    argv = remediate_argv("watch", "all", "-i", str(inventory), "--state-dir", str(state), "--interval", "2s",
                          "--wait-timeout", "180")  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        poll(lambda: notified.times("READY=1"), deadline=60, what="READY=1")
        ready_s = notified.times("READY=1")[0] - started
        poll(lambda: len([e for e in _events(state) if e["event"] == "unreachable"]) == 18, deadline=60,
             what="the first round")  # fmt: skip

        _crash(slow)
        poll(lambda: [e for e in _events(state) if e["event"] == "acted"], deadline=60, what="the slow fix")
        _crash(other)
        name = other.host.name
        poll(lambda: [e for e in _events(state) if e["event"] == "decided" and e["host"] == name], deadline=60,
             what="the other host's decision")  # fmt: skip
        events = _events(state)
        assert not [e for e in events if e["event"] == "outcome"], "decided while the slow fix still runs"
        (detected,) = [e for e in events if e["event"] == "detected" and e["host"] == name]
        (decided,) = [e for e in events if e["event"] == "decided" and e["host"] == name]
        assert decided["verdict"] == "wait", decided
        latency = float(detected["at"]) - max(float(c["at"]) for c in detected["crashes"])  # type: ignore[union-attr]
        status = subprocess.run(remediate_argv("watch", "status", "--json", "--state-dir", str(state)), cwd=tmp_path,
                                env=_cli_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
        outcomes = {i["host"]: i["outcome"] for i in json.loads(status.stdout)["incidents"]}
        assert outcomes == {slow.host.name: "remediating", name: "wait"}, outcomes

        poll(lambda: len([e for e in _events(state) if e["event"] == "outcome"]) == 2, deadline=LOAD_S + 120,
             what="both fixes")  # fmt: skip
        outcomes = {str(e["host"]): e["outcome"] for e in _events(state) if e["event"] == "outcome"}
        assert outcomes == {slow.host.name: "remediated", name: "remediated"}, outcomes
        fixed_at = time.monotonic()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        notified.close()
    assert proc.returncode == 0, err
    beats = [t for t in notified.times("WATCHDOG=1") if t <= fixed_at]
    gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    assert beats and fixed_at - beats[-1] <= WATCHDOG_USEC / 2e6
    assert max(gaps) <= WATCHDOG_USEC / 2e6, gaps  # sd_watchdog_enabled(3): ping at half the interval
    assert notified.times("STOPPING=1")
    print(f"READY after {ready_s:.1f}s; WATCHDOG gaps max {max(gaps):.1f}s over {len(gaps)}; "
          f"the other host detected {latency:.2f}s after its exit line")  # fmt: skip
