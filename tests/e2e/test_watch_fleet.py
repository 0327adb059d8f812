"""`remediate watch` over 4 sandbox hosts: a crash on host 2 is fixed on host 2 only (hosts 1, 3, 4 keep
their NRestarts, InvocationID and unit bytes, and their systemctl audit shows nothing that changes them);
3 of 4 crashing in one round trip the breaker: nothing is changed anywhere, the reason is in the audit log
and `watch status`, and `watch resume` re-arms it."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandbox import Sandbox, SandboxHost
from sandbox.units import free_port
from tests.support.fleet import fleet_events as _events
from tests.support.fleet import fleet_fingerprint as _fingerprint
from tests.support.fleet import watch_fleet as _watch
from tests.support.fleet import write_inventory
from tests.support.node import FAST_KNOBS, UNIT_PATH, Node
from tests.support.watch import crash_32k as _crash

if TYPE_CHECKING:
    from tests.support.webhook import Hook

pytestmark = pytest.mark.e2e


@pytest.fixture
def fleet4(sandbox_fleet: Sandbox, fresh_hosts: Callable[[int], list[SandboxHost]], tmp_path: Path):
    nodes = [Node(sandbox_fleet, h, tmp_path, free_port(h.address)) for h in fresh_hosts(4)]

    def install(node: Node) -> None:
        node.host.set_standin(**FAST_KNOBS)
        node.install_incident()

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(install, nodes))
    return nodes, write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, [n.host for n in nodes])


def test_crash_on_host_2_is_fixed_there_only(fleet4, tmp_path: Path) -> None:
    nodes, inventory = fleet4
    assert _watch(tmp_path, inventory, "all").returncode == 0
    others = [nodes[0], nodes[2], nodes[3]]
    before = [_fingerprint(n) for n in others]
    original = nodes[1].bytes(UNIT_PATH)

    _crash(nodes[1])
    run = _watch(tmp_path, inventory, "all")
    assert run.returncode == 0, run
    events = _events(tmp_path)
    assert {e.get("host") for e in events} == {nodes[1].host.name}, events
    assert [e["event"] for e in events] == ["detected", "diagnosed", "decided", "acted", "outcome"]
    assert events[-1]["outcome"] == "remediated"
    assert nodes[1].bytes(UNIT_PATH) != original
    assert [_fingerprint(n) for n in others] == before, "hosts 1, 3, 4 untouched"
    nodes[1].wait_healthy()
    assert nodes[1].generate(32768, 3).status == 200


def test_three_of_four_trip_the_breaker_and_nothing_changes(fleet4, tmp_path: Path, hook: Hook) -> None:
    nodes, inventory = fleet4
    assert _watch(tmp_path, inventory, "all").returncode == 0
    units = [n.bytes(UNIT_PATH) for n in nodes]
    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(_crash, nodes[:3]))
    run = _watch(tmp_path, inventory, "all", "--webhook", hook.url)
    assert run.returncode == 0, run
    events = _events(tmp_path)
    notified = [b["event"] for b in hook.bodies]
    assert any(e["event"] == "breaker" and "3 of 4" in e["reason"] for e in notified), notified  # type: ignore[index]
    assert not [e for e in events if e["event"] == "acted"], "nothing acted with the breaker open"
    breaker = [e for e in events if e["event"] == "breaker"]
    assert len(breaker) == 1 and "3 of 4 hosts crashed" in str(breaker[0]["reason"])
    assert {e["verdict"] for e in events if e["event"] == "decided"} == {"breaker_open"}
    assert [n.bytes(UNIT_PATH) for n in nodes] == units, "no unit changed anywhere"

    status = json.loads(_watch(tmp_path, inventory, "status", "--json").stdout)
    assert "3 of 4 hosts crashed" in status["breaker"]
    assert _watch(tmp_path, inventory, "resume").returncode == 0
    assert json.loads(_watch(tmp_path, inventory, "status", "--json").stdout)["breaker"] is None
