"""`remediate … --local` (oom, status, diagnose, bench, rollback) inside a sandbox host: the library installed
there from wheels (no index, no python3-venv), run over ``ssh HOST remediate oom --local``: the same transaction
as over SSH, through the local transport, paramiko never imported."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.support.node import UNIT, UNIT_PATH, Node
from tests.support.wheelhouse import VENV, install, remediate_over_ssh, ssh

pytestmark = pytest.mark.e2e


def _doc(proc: object) -> dict:
    assert proc.stdout.strip(), f"exit {proc.returncode}\n{proc.stderr}"  # type: ignore[attr-defined]
    return json.loads(proc.stdout)  # type: ignore[attr-defined]


def test_oom_local_inside_the_host_remediates_and_rolls_back(incident: Node, wheels: Path) -> None:
    host, config = incident.host, incident.fleet.ssh_config
    install(host, wheels)
    original = host.read(UNIT_PATH)

    dry = remediate_over_ssh(config, host, "oom", "--local", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    [planned] = _doc(dry)["results"]
    assert planned["host"] == host.name  # the machine's own hostname
    assert "+ExecStart=" in planned["diff"] or "0.93" in planned["diff"], planned
    assert host.read(UNIT_PATH) == original  # a dry run changes nothing

    run = remediate_over_ssh(config, host, "oom", "--local", "--json", "--wait-timeout", "60")
    [result] = _doc(run)["results"]
    assert run.returncode == 0, result
    assert (result["host"], result["outcome"], result["unit"]) == (host.name, "remediated", UNIT)
    assert result["max_total_num_tokens"] > 0
    assert "--mem-fraction-static 0.93" in host.read(UNIT_PATH)
    assert result["backup"] and host.path(result["backup"]).read_text() == original
    changing = [c for c in host.audit() if c.split(" ", 1)[0] in ("daemon-reload", "reset-failed", "restart")]
    assert changing == ["daemon-reload", f"reset-failed {UNIT}", f"restart {UNIT}"], changing

    again = remediate_over_ssh(config, host, "oom", "--local", "--json")
    [second] = _doc(again)["results"]
    assert (again.returncode, second["outcome"], second["changed"]) == (0, "unchanged", False), second

    status = remediate_over_ssh(config, host, "status", "--local", "--json")
    [state] = _doc(status)["results"]
    assert (status.returncode, state["host"], state["max_total_num_tokens"]) == (
        0,
        host.name,
        result["max_total_num_tokens"],
    )

    why = remediate_over_ssh(config, host, "diagnose", "--local", "--json")
    assert (why.returncode, _doc(why)["results"][0]["host"]) == (0, host.name), why.stderr

    swept = remediate_over_ssh(config, host, "bench", "--local", "--contexts", "1k", "--gen", "4", "--json")
    assert swept.returncode == 0, swept.stdout[-2000:] + swept.stderr
    [sweep] = _doc(swept)["results"]  # the streamed /generate over the loopback socket, exact token counts
    assert (sweep["host"], [p["prompt_tokens"] for p in sweep["points"]]) == (host.name, [1024]), sweep

    back = remediate_over_ssh(config, host, "rollback", "--local", "--json", "--wait-timeout", "60")
    [restored] = _doc(back)["results"]
    assert (back.returncode, restored["outcome"]) == (0, "restored"), restored
    assert host.read(UNIT_PATH) == original


def test_local_never_imports_paramiko_on_the_host_and_refuses_a_target(incident: Node, wheels: Path) -> None:
    host, config = incident.host, incident.fleet.ssh_config
    install(host, wheels)
    code = (
        "import sys; from remediate.cli.app import cli\n"
        "try:\n    cli(['status', '--local', '--json'])\nexcept SystemExit as e:\n    code = e.code\n"
        "assert 'paramiko' not in sys.modules and 'fabric' not in sys.modules, 'ssh imported'\n"
        "sys.exit(code)"
    )
    proc = ssh(config, host, shlex.join([f"{VENV}/bin/python", "-c", code]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"][0]["host"] == host.name
    bad = remediate_over_ssh(config, host, "oom", "--local", host.name)
    assert (bad.returncode, bad.stderr) == (
        2,
        f"remediate: --local works on this machine: give no TARGET (got {host.name})\n",
    )
    assert not [c for c in host.audit() if c.startswith(("restart", "daemon-reload", "reset-failed"))]


def test_the_callers_bash_env_functions_and_path_reach_no_root_shell_of_local(incident: Node, wheels: Path) -> None:
    """Issue 31: `BASH_ENV`, an exported `systemctl` function and a `PATH` whose first directory holds a hostile
    `systemctl` and `flock`, all in the caller's environment on the host: `status` and a dry-run `oom` --local
    read the host as usual and none of them ever runs (each would write the marker)."""
    host, config = incident.host, incident.fleet.ssh_config
    install(host, wheels)
    marker, evil = "/root/issue31-reached", "/root/issue31-bin"
    hostile = "; ".join(
        [f"rm -f {marker}", f"mkdir -p {evil}"]
        + [
            f"printf '#!/bin/sh\\necho {t} >> {marker}\\n' > {evil}/{t}; chmod 755 {evil}/{t}"
            for t in ("systemctl", "flock")
        ]
        + [f"echo 'echo BASH_ENV >> {marker}' > /root/issue31-env"]
    )
    assert ssh(config, host, hostile).returncode == 0
    env = f"BASH_ENV=/root/issue31-env PATH={evil}:$PATH 'BASH_FUNC_systemctl%%=() {{ echo function >> {marker}; }}'"
    for args in (["status", "--local", "--json"], ["oom", "--local", "--dry-run", "--json"]):
        run = ssh(config, host, f"env {env} {shlex.join([f'{VENV}/bin/remediate', *args])}")
        assert run.returncode == 0, run.stderr
        assert _doc(run)["results"][0]["host"] == host.name
    reached = ssh(config, host, f"cat {marker}")
    assert reached.returncode != 0, f"a root shell of --local ran the caller's code: {reached.stdout}"
    # the hostile environment does reach the caller's own shell (the test can fail): its bash sources BASH_ENV
    assert ssh(config, host, f"env {env} bash -c true; cat {marker}").stdout == "BASH_ENV\n"
    ssh(config, host, f"rm -f {marker}")
    run = ssh(config, host, f"env {env} {VENV}/bin/remediate status --local --json; test ! -e {marker}")
    assert run.returncode == 0, run.stderr
