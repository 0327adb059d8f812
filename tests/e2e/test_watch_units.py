"""`remediate watch` with no unit named, over 3 sandbox hosts: a vLLM host (``vllm.service``) and an sglang
host whose unit has a name of its own (``llm-prod.service``) are both found as `oom` finds them and watched
(their crashes detected on those units, fixed there); a host running no engine is named in one line on
stderr and in `watch status`, never polled as a unit that does not exist."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxHost
from sandbox.units import free_port, incident_unit
from tests.support.fleet import write_inventory
from tests.support.node import FAST_KNOBS, CliRun, Node, poll, remediate_argv, run_cli
from tests.support.vllm import complete as _complete
from tests.support.vllm import vllm_unit as _unit

pytestmark = pytest.mark.e2e
SGLANG_UNIT = "llm-prod.service"


@pytest.fixture
def fleet3(sandbox_fleet: Sandbox, fresh_hosts: Callable[[int], list[SandboxHost]], tmp_path: Path):
    nodes = [Node(sandbox_fleet, h, tmp_path, free_port(h.address)) for h in fresh_hosts(3)]
    for n in nodes:
        n.host.set_standin(**FAST_KNOBS)

    def install(i: int) -> None:
        if i == 0:
            nodes[0].install(_unit(nodes[0], "0.95"), name="vllm.service")
        elif i == 1:
            nodes[1].install(incident_unit(nodes[1].host.address, nodes[1].port), name=SGLANG_UNIT)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(install, range(3)))
    try:
        yield nodes, write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, [n.host for n in nodes])
    finally:
        for n in nodes:
            n.cleanup()


def _watch(tmp_path: Path, inventory: Path, *args: str) -> CliRun:
    argv = remediate_argv("watch", *args, "--state-dir", str(tmp_path / "watch-state"))
    if args and args[0] == "all":
        argv += ["-i", str(inventory), "--once", "--wait-timeout", "60"]
    return run_cli(argv, cwd=tmp_path, timeout=600)


def _events(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "watch-state" / "watch-audit.jsonl").read_text().splitlines()]


def test_no_unit_named_vllm_and_a_renamed_sglang_unit_are_watched(fleet3, tmp_path: Path) -> None:
    nodes, inventory = fleet3
    vllm, sglang, bare = nodes
    first = _watch(tmp_path, inventory, "all")
    assert first.returncode == 0, first
    (missing,) = [e for e in _events(tmp_path) if e["event"] == "no_unit"]
    assert missing["host"] == bare.host.name and "no systemd unit runs sglang or vLLM" in str(missing["reason"])
    assert f"remediate: watch: {bare.host.name}: nothing watched: no systemd unit runs" in first.stderr, first.stderr
    assert not [e for e in _events(tmp_path) if e["event"] == "detected"], "healthy units: nothing detected"

    assert _complete(vllm, 32000).status == 500
    poll(lambda: vllm.show("ActiveState", unit="vllm.service")["ActiveState"] == "failed", deadline=20,
         what="vllm.service failed")  # fmt: skip
    for seed in (1, 2):
        assert sglang.generate(2000, seed).status == 200
    assert sglang.generate(32768, 3).status is None
    poll(lambda: any("CUDA out of memory" in line for line in sglang.journal(SGLANG_UNIT)), deadline=10,
         what="the OOM")  # fmt: skip
    policy = tmp_path / "policy.yaml"
    policy.write_text("breaker: {count: 2}\n")  # two crashed hosts of three: not the fleet-wide failure here
    run = _watch(tmp_path, inventory, "all", "--policy", str(policy))
    assert run.returncode == 0, run
    events = _events(tmp_path)
    detected = {(e["host"], e["unit"]) for e in events if e["event"] == "detected"}
    assert detected == {(vllm.host.name, "vllm.service"), (sglang.host.name, SGLANG_UNIT)}, events
    outcomes = {(e["host"], e["unit"]): e["outcome"] for e in events if e["event"] == "outcome"}
    assert outcomes[(sglang.host.name, SGLANG_UNIT)] == "remediated", events
    fixed = next(e for e in events if e["event"] == "outcome" and e["unit"] == SGLANG_UNIT)
    assert fixed["flags"]["after"], fixed  # type: ignore[index]  # the real change, not `flags: null`
    sglang.wait_healthy(SGLANG_UNIT)
    assert sglang.generate(32768, 3).status == 200, "the renamed unit was the one fixed"

    status = json.loads(_watch(tmp_path, inventory, "status", "--json").stdout)
    assert status["hosts"][bare.host.name] == "no_unit"
    assert "no systemd unit runs sglang or vLLM" in status["no_unit"][bare.host.name]


def test_a_named_unit_that_does_not_exist_is_named_not_polled(fleet3, tmp_path: Path) -> None:
    nodes, inventory = fleet3
    run = _watch(tmp_path, inventory, "all", "--unit", "sglang.service")
    assert run.returncode == 0, run
    missing = {e["host"]: e["reason"] for e in _events(tmp_path) if e["event"] == "no_unit"}
    assert set(missing) == {n.host.name for n in nodes}, missing
    assert all("unit sglang.service not found (LoadState=not-found)" == r for r in missing.values()), missing
    assert run.stderr.count("nothing watched: unit sglang.service not found") == 3, run.stderr
