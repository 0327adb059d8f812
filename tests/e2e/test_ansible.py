"""The Ansible collection (ansible/) against sandbox hosts, through Ansible's own ssh connection with host keys
checked (the sandbox's known_hosts, StrictHostKeyChecking yes): ansible/examples/oom.yml as shipped, the
library installed on each host from wheels."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sandbox import Sandbox, SandboxHost
from sandbox.units import incident_unit
from tests.support.ansible_play import BIN, Play
from tests.support.node import FAST_KNOBS, UNIT, UNIT_PATH
from tests.support.wheelhouse import install

pytestmark = pytest.mark.e2e

RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def recap(out: str) -> dict[str, tuple[int, int, int, int]]:
    """PLAY RECAP: host → (ok, changed, unreachable, failed)."""
    return {m[1]: (int(m[2]), int(m[3]), int(m[4]), int(m[5])) for m in RECAP.finditer(out.split("PLAY RECAP")[-1])}


RESULT = re.compile(r"^(?:ok|changed|fatal): \[([^\]]+)\](?: => |: FAILED! => )(\{.*\})$", re.M)


def results(out: str) -> dict[str, dict[str, Any]]:
    """Each host's module result as ``-v`` prints it (one JSON line each: see :meth:`Play.run`)."""
    return {m[1]: json.loads(m[2]) for m in RESULT.finditer(out)}


@pytest.fixture
def play(
    sandbox_fleet: Sandbox,
    fresh_hosts: Callable[[int], list[SandboxHost]],
    wheels: Path,
    collections: Path,
    tmp_path: Path,
):
    hosts = fresh_hosts(3)

    def prepare(host: SandboxHost) -> None:
        host.set_standin(**FAST_KNOBS)
        host.install_unit(UNIT, incident_unit(listen=host.address), start=True)
        install(host, wheels)

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(prepare, hosts))
    return Play(sandbox_fleet, hosts, tmp_path, collections)


def test_check_diff_shows_the_change_and_changes_nothing_then_a_run_remediates_once(play: Play) -> None:
    canary = play.hosts[0]
    secret = "hf_abcdefSECRET42"  # a token in the unit, next to the lines the diff shows: masked there
    with_token = incident_unit(listen=canary.address).replace(
        "Environment=HF_HOME=", f"Environment=HF_TOKEN={secret}\nEnvironment=HF_HOME="
    )
    canary.install_unit(UNIT, with_token, start=True)
    before = {h.name: h.read(UNIT_PATH) for h in play.hosts}

    checked = play.run("--check", "--diff")
    assert secret not in checked.stdout and " Environment=HF_TOKEN=***" in checked.stdout
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("--mem-fraction-static 0.94") >= 3 and "--mem-fraction-static 0.93" in checked.stdout
    assert checked.stdout.count(f"--- a{UNIT_PATH}\n+++ b{UNIT_PATH}") == 3  # each host's unit diff
    assert recap(checked.stdout) == {h.name: (1, 1, 0, 0) for h in play.hosts}  # would change
    assert {h.name: h.read(UNIT_PATH) for h in play.hosts} == before
    assert not [c for h in play.hosts for c in h.audit() if c.startswith(("restart", "daemon-reload"))]

    ran = play.run("-v")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr
    assert secret not in ran.stdout  # the results (-v prints them whole) are masked too
    found = results(ran.stdout)
    for host in play.hosts:
        result = found[host.name]
        assert (result["changed"], result["outcome"]) == (True, "remediated"), result
        assert result["max_total_num_tokens"] > 0 and result["unit"] == UNIT
        assert result["backup"].startswith(f"{UNIT_PATH}.bak.oom.")
        assert "--mem-fraction-static 0.93" in host.read(UNIT_PATH)
    assert recap(ran.stdout) == {h.name: (1, 1, 0, 0) for h in play.hosts}

    again = play.run()
    assert again.returncode == 0, again.stdout + again.stderr
    assert recap(again.stdout) == {h.name: (1, 0, 0, 0) for h in play.hosts}  # changed=false everywhere


def test_an_unhealthy_host_is_rolled_back_counted_failed_and_stops_the_rollout(play: Play) -> None:
    canary, bad, untouched = play.hosts
    original = {h.name: h.read(UNIT_PATH) for h in play.hosts}
    play.host_vars[bad.name] = {"remediate_min_tokens": 10**9}  # its pool never reaches that: not healthy

    ran = play.run("-v")
    assert ran.returncode == 2, ran.stdout + ran.stderr  # ansible-playbook: a host failed
    failed = results(ran.stdout)[bad.name]
    assert (failed["outcome"], failed["changed"]) == ("rolled_back", True), failed  # fatal: counted below
    assert "rolled back" in failed["msg"] and "\n" not in failed["msg"]  # the tool's one line
    counts = recap(ran.stdout)
    assert counts[canary.name] == (1, 1, 0, 0)
    assert counts[bad.name] == (0, 0, 0, 1)  # failed (Ansible counts a failed task never as changed)
    assert counts.get(untouched.name, (0, 0, 0, 0)) == (0, 0, 0, 0)  # max_fail_percentage 0: never reached
    assert bad.read(UNIT_PATH) == original[bad.name] and untouched.read(UNIT_PATH) == original[untouched.name]
    assert "--mem-fraction-static 0.93" in canary.read(UNIT_PATH)


ADHOC = re.compile(r"^(\S+) \| (SUCCESS|CHANGED|FAILED!?)[^{]*=> (\{.*\})$", re.M)


def test_each_module_ad_hoc_status_diagnose_oom_rollback(play: Play) -> None:
    host = play.hosts[0]
    play.run("--list-hosts")  # writes the inventory
    original = host.read(UNIT_PATH)

    def module(name: str, *args: str, collection: str = "remediate.serving") -> tuple[str, dict[str, Any]]:
        argv = [
            str(BIN / "ansible"),
            host.name,
            "-i",
            str(play.inventory),
            "-b",
            "-o",
            "-m",
            f"{collection}.{name}",
        ]
        ran = subprocess.run([*argv, *args], capture_output=True, text=True, env=play.env, cwd=play.tmp, timeout=300)
        (match,) = [m for m in ADHOC.finditer(ran.stdout) if m[1] == host.name]
        return match[2], json.loads(match[3])

    state, status = module("status")
    facts = status["ansible_facts"]["remediate_sglang"]
    assert (state, status["changed"], facts["remediated"], facts["unit"]) == ("SUCCESS", False, False, UNIT)
    assert facts["tokens"] > 0 and facts["flags"]["mem_fraction_static"] == "0.94"

    state, why = module("diagnose")
    assert (state, why["changed"]) == ("SUCCESS", False), why

    state, fixed = module("oom", "-a", "mem_fraction_static=0.9")
    assert (state, fixed["outcome"], fixed["max_total_num_tokens"] > 0) == ("CHANGED", "remediated", True), fixed
    state, status = module("status")
    assert status["ansible_facts"]["remediate_sglang"]["remediated"] is True

    state, back = module("rollback")
    assert (state, back["outcome"]) == ("CHANGED", "restored"), back
    assert host.read(UNIT_PATH) == original

    # The old name (remediate.sglang, redirects only) runs the same module on the host.
    state, old = module("status", collection="remediate.sglang")
    assert (state, old["ansible_facts"]["remediate_sglang"]["remediated"]) == ("SUCCESS", False), old
