"""What the on-call reads in the morning (#33), on 3 sandbox hosts: one crash fixed (its host in the
cooldown), one fix rolled back (its new server dies at once: the transaction put the old bytes back), one
host healthy all night. The watcher printed one line per event (nothing while all was healthy), and
`watch status` lists the three hosts with the last crash, the last fix (its change, its backup, its time),
when the next fix is allowed; `--json` carries the same."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxHost
from sandbox.units import free_port
from tests.support.fleet import write_inventory
from tests.support.node import FAST_KNOBS, UNIT_PATH, CliRun, Node, poll, remediate_argv, run_cli

pytestmark = pytest.mark.e2e


@pytest.fixture
def night(sandbox_fleet: Sandbox, fresh_hosts: Callable[[int], list[SandboxHost]], tmp_path: Path):
    nodes = [Node(sandbox_fleet, h, tmp_path, free_port(h.address)) for h in fresh_hosts(3)]

    def install(node: Node) -> None:
        node.host.set_standin(**FAST_KNOBS)
        node.install_incident()

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(install, nodes))
    return nodes, write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, [n.host for n in nodes])


def _remediate(tmp_path: Path, *args: str) -> CliRun:
    return run_cli(remediate_argv("watch", *args, "--state-dir", str(tmp_path / "watch-state")), cwd=tmp_path,
                   timeout=600)  # fmt: skip


def _crash(node: Node) -> None:
    for seed in (1, 2):
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None
    poll(lambda: any("CUDA out of memory" in line for line in node.journal()), deadline=10, what="the OOM")


def test_the_morning_after_a_fixed_crash_and_a_rolled_back_fix(night, tmp_path: Path) -> None:
    (fixed, undone, calm), inventory = night
    policy = tmp_path / "policy.yaml"
    policy.write_text("breaker: {count: 3}\n")  # two crashes of three hosts: not the fleet-wide failure here
    watch = ("all", "-i", str(inventory), "--once", "--wait-timeout", "60", "--policy", str(policy))
    quiet = _remediate(tmp_path, *watch)
    assert quiet.returncode == 0 and quiet.stdout == "", quiet  # all healthy: silent

    undone.host.set_standin(**FAST_KNOBS, failure="exit_at_once", failure_match="--chunked-prefill-size 4096")
    original = undone.bytes(UNIT_PATH)
    _crash(fixed)
    _crash(undone)
    run = _remediate(tmp_path, *watch)
    assert run.returncode == 0, run
    printed = run.stdout.splitlines()
    for node, end in ((fixed, "fix remediated"), (undone, "fix rolled_back")):
        # One fix at a time (the default concurrency): the host decided second waits, visibly, then is decided
        # again and fixed in the same --once run.
        mine = [line for line in printed if f" {node.host.name} sglang.service " in line and "decided wait" not in line]
        assert [next(w for w in ("crashed:", "decided act", "fixing", "fix ") if w in line) for line in mine] == [
            "crashed:", "decided act", "fixing", "fix "
        ], printed  # fmt: skip
        assert end in mine[-1], mine
    assert len([line for line in printed if "decided wait: 1 fix(es) in flight" in line]) == 1, printed
    assert not [line for line in printed if calm.host.name in line], "the healthy host: no line"
    assert "chunk -→4096, alloc -→expandable_segments:True" in next(
        line for line in printed if "fix remediated" in line
    ), printed
    assert undone.bytes(UNIT_PATH) == original, "the fix that did not come up was put back"

    doc = json.loads(_remediate(tmp_path, "status", "--json", "--policy", str(policy)).stdout)
    hosts = {w["host"]: w for w in doc["watched"]}
    assert set(hosts) == {fixed.host.name, undone.host.name, calm.host.name}, doc["watched"]
    assert hosts[calm.host.name]["state"] == "healthy" and hosts[calm.host.name]["last_crash"] is None
    assert hosts[calm.host.name]["last_fix"] is None and hosts[calm.host.name]["units"] == ["sglang.service"]

    good = hosts[fixed.host.name]
    assert good["state"] == "cooling_down", good
    assert "cuda_oom_runtime" in good["last_crash"]["kinds"], good
    fix = good["last_fix"]
    assert fix["outcome"] == "remediated" and fix["took_s"] > 0, fix
    assert fix["fraction"] == {"name": "mem_fraction_static", "before": "0.94", "after": "0.94"}, fix
    assert fix["chunk"] == {"name": "chunked_prefill_size", "before": None, "after": "4096"}, fix
    assert fix["alloc_conf"]["after"] == "expandable_segments:True", fix
    assert fix["tokens"]["after"] and fix["tokens"]["before"], fix
    assert fix["backup"] in fixed.backups(UNIT_PATH), (fix["backup"], fixed.backups(UNIT_PATH))
    assert good["next_fix"]["why"] == "cooldown" and good["next_fix"]["at"] == pytest.approx(fix["at"] + 3600, abs=5)
    assert good["fixes_24h"] == 1 and good["incidents"] == [], good

    bad = hosts[undone.host.name]
    assert bad["last_fix"]["outcome"] == "rolled_back" and bad["last_fix"]["backup"], bad
    assert bad["next_fix"]["why"] == "cooldown", "a rolled-back fix counts against the cooldown too"

    text = _remediate(tmp_path, "status", "--policy", str(policy))
    assert text.returncode == 0, text
    lines = text.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines if not line.lstrip().startswith("undo: ")), lines
    assert f"{calm.host.name}: healthy  (sglang.service)" in lines, lines
    assert f"{fixed.host.name}: cooling_down  (sglang.service)" in lines, lines
    block = "\n".join(lines[lines.index(f"{fixed.host.name}: cooling_down  (sglang.service)") :])
    assert "cuda_oom_runtime" in block and "remediated in " in block and "chunk -→4096" in block, block
    assert f"undo: remediate rollback {fixed.host.name} --to {fix['backup']}" in block, block
    assert "next   fix allowed " in block and "cooldown 3600s" in block, block
    assert any(line.startswith(f"{undone.host.name}: ") for line in lines), lines
    assert "rolled_back in " in text.stdout, text.stdout
