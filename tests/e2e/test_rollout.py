"""Fleet rollout end to end on 12 sandbox hosts: canary, batches, forks cap, failure budget, retry file."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from sandbox import Sandbox, SandboxHost
from sandbox.units import incident_unit
from tests.support.fleet import remediate, write_inventory
from tests.support.node import FAST_KNOBS, REPO, UNIT, UNIT_PATH, sha256_text

pytestmark = pytest.mark.e2e


@pytest.fixture
def fleet12(sandbox_fleet: Sandbox, sandbox_hosts: list[SandboxHost], tmp_path: Path):
    hosts = sandbox_hosts[:12]
    assert len(hosts) == 12, "the rollout acceptance needs a 12-host sandbox fleet"

    def install(host: SandboxHost) -> None:
        host.set_standin(**FAST_KNOBS)
        host.install_unit(UNIT, incident_unit(listen=host.address), start=True)

    with ThreadPoolExecutor(max_workers=6) as pool:  # as sandbox_hosts resets them: each waits on its systemd
        list(pool.map(install, hosts))
    return hosts, write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, hosts)


def max_overlap(results: list[dict]) -> int:
    events = sorted([(r["started_at"], 1) for r in results] + [(r["finished_at"], -1) for r in results])
    current = best = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


def test_all_remediated_canary_first_batches_in_order_forks_capped(fleet12, tmp_path: Path) -> None:
    hosts, inventory = fleet12
    run = remediate(
        "oom", "all", "-i", str(inventory), "--canary", "1", "--batch", "2,50%", "--forks", "3", "--json", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    by_host = {r["host"]: r for r in doc["results"]}
    assert [r["host"] for r in doc["results"]] == [h.name for h in hosts]  # inventory order
    assert doc["summary"] == {"remediated": 12}
    assert all(r["max_total_num_tokens"] == 195011 for r in doc["results"])
    batches = doc["rollout"]["batches"]
    assert [len(b) for b in batches] == [1, 2, 6, 3]
    assert batches[0] == [hosts[0].name]
    for earlier, later in zip(batches, batches[1:], strict=False):
        assert max(by_host[h]["finished_at"] for h in earlier) <= min(by_host[h]["started_at"] for h in later)
    assert max_overlap(doc["results"]) <= 3
    for host in hosts:
        audit = host.audit()
        assert audit.index("daemon-reload") < audit.index(f"restart {UNIT}")
        assert "--mem-fraction-static 0.93" in host.read(UNIT_PATH)
    assert not list(tmp_path.glob("remediate-retry-*.yaml"))


def test_unhealthy_host_rolls_back_and_halts_the_rollout(fleet12, tmp_path: Path) -> None:
    hosts, inventory = fleet12
    bad = hosts[3]
    original = bad.read(UNIT_PATH)
    # Only the remediated command line misbehaves, so the rollback brings the old server back.
    bad.set_standin(time_scale=0.001, failure="never_healthy", failure_match="--chunked-prefill-size 4096")
    run = remediate(
        "oom", "all", "-i", str(inventory), "--canary", "1", "--batch", "2", "--forks", "2",
        "--max-failures", "0", "--wait-timeout", "5", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    doc = json.loads(run.stdout)
    outcome = {r["host"]: r["outcome"] for r in doc["results"]}
    # batches: [gpu-0] [gpu-1 gpu-2] [gpu-3 gpu-4] …: gpu-4 was in flight with gpu-3 and finishes
    assert [outcome[h.name] for h in hosts[:5]] == [
        "remediated",
        "remediated",
        "remediated",
        "rolled_back",
        "remediated",
    ]
    assert all(outcome[h.name] == "not_attempted" for h in hosts[5:])
    assert "exceed --max-failures 0" in doc["rollout"]["halted"]
    assert sha256_text(bad.read(UNIT_PATH)) == sha256_text(original)
    assert bad.show(UNIT, "ActiveState")["ActiveState"] == "active"
    for host in hosts[5:]:
        assert f"restart {UNIT}" not in host.audit()
    retry = Path(doc["rollout"]["retry_file"])
    if not retry.is_absolute():
        retry = tmp_path / retry
    again = yaml.safe_load(retry.read_text())
    assert list(again["hosts"]) == [bad.name] + [h.name for h in hosts[5:]]
    assert again["hosts"][bad.name]["address"] == bad.address
    assert again["defaults"]["known_hosts"]  # usable as -i for the next run
    status = remediate("status", "all", "-i", str(retry), "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert [r["host"] for r in json.loads(status.stdout)["results"]] == list(again["hosts"])


def test_group_and_pattern_selection(fleet12, tmp_path: Path) -> None:
    hosts, inventory = fleet12
    run = remediate("oom", "rack-b", "-i", str(inventory), "--dry-run", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [r["host"] for r in json.loads(run.stdout)["results"]] == [h.name for h in hosts[6:]]
    run = remediate("oom", "gpu-1*", "-i", str(inventory), "--dry-run", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    names = [r["host"] for r in json.loads(run.stdout)["results"]]
    assert names == [h.name for h in hosts if h.name.startswith("gpu-1")]
    assert all(f"restart {UNIT}" not in h.audit() for h in hosts)


def test_ansible_inventory(fleet12, sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    hosts, _ = fleet12
    ansible = {
        "all": {
            "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": str(sandbox_fleet.identity)},
            "children": {
                "gpus": {"hosts": {h.name: {"ansible_host": h.address} for h in hosts[:2]}},
            },
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(ansible))
    run = remediate(
        "oom", "gpus", "-i", str(path), "--known-hosts", str(sandbox_fleet.known_hosts), "--json", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert [r["outcome"] for r in doc["results"]] == ["remediated", "remediated"]


def test_bad_inventory_exits_2_naming_file_and_line_and_touches_nothing(fleet12, tmp_path: Path) -> None:
    hosts, inventory = fleet12
    text = inventory.read_text().replace("target_tokens: 200000", "target_tokens: lots")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    run = remediate("oom", "all", "-i", str(bad), cwd=tmp_path)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{bad}: line " in lines[0] and "target_tokens" in lines[0], run.stderr
    assert all(h.audit() == [] for h in hosts)


def test_scripted_rollout_with_custom_policy(fleet12, tmp_path: Path) -> None:
    hosts, inventory = fleet12
    run = subprocess.run(
        [sys.executable, str(REPO / "examples" / "rollout.py"), "-i", str(inventory), "all", "--min-pool", "200000"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "halted: gpu-0 reports max_total_num_tokens=195,011 < 200,000" in run.stdout
    lines = [line.split() for line in run.stdout.splitlines() if line.startswith("gpu-")]
    assert lines[0][:2] == ["gpu-0", "remediated"]
    assert all(line[1] == "not_attempted" for line in lines[1:])
