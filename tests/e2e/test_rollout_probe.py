"""A --probe typo (longer than the context) stops the rollout at its first host, before anything is written:
it used to cost every host past the canary a restart, a failed probe and a rollback."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxHost
from sandbox.units import incident_unit
from tests.support.fleet import remediate, write_inventory
from tests.support.node import FAST_KNOBS, UNIT, UNIT_PATH, sha256_text

pytestmark = pytest.mark.e2e


def test_a_probe_above_the_context_length_is_refused_before_any_host_is_changed(
    sandbox_fleet: Sandbox, fresh_hosts: Callable[[int], list[SandboxHost]], tmp_path: Path
) -> None:
    hosts = fresh_hosts(2)
    texts = {}
    for host in hosts:
        host.set_standin(**FAST_KNOBS)
        text = incident_unit(listen=host.address).replace(
            "--mem-fraction-static", "--context-length 65536 --mem-fraction-static", 1
        )
        host.install_unit(UNIT, text, start=True)
        texts[host.name] = text
    inventory = write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, hosts)

    run = remediate("oom", "all", "-i", str(inventory), "--canary", "1", "--probe", "100000", "--json", cwd=tmp_path)

    doc = json.loads(run.stdout)
    first, second = doc["results"]
    assert first["outcome"] == "failed", first
    assert first["error"] == (
        f"{hosts[0].name}: --probe 100,000 + 1 generated token exceeds the context length 65,536 "
        "(the unit's --context-length): no server can take it; nothing was changed"
    )
    assert second["outcome"] == "not_attempted", second
    assert run.returncode == 2, run.stderr
    for host in hosts:
        assert sha256_text(host.read(UNIT_PATH)) == sha256_text(texts[host.name]), f"{host.name} was written"
        assert not [p for p in host.path("/etc/systemd/system").iterdir() if ".bak." in p.name]
