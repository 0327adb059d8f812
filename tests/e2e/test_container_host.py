"""Container-style hosts: PID 1 and ``systemctl`` are docker-systemctl-replacement's systemctl3.py, not systemd.

systemctl3.py forks a service from its caller (``do_start_service_from``), so a server started by the commit
script inherits every descriptor the script had open: without templates/_flock.sh.j2's rule (no child keeps a
lock descriptor) the new server held the commit lock for its whole life and every later run of the unit waited
7.5 minutes for it. Here: oom, a second oom, rollback, status and a 3-host rollout with a canary and a rolled-back
host work as on a systemd host; after each, no process on the host holds a descriptor of a lock under
/run/remediate, and each next run takes the lock at once (``--lock-timeout 1``: a held lock fails it).

Three hosts ``ctr-0..2`` of their own (sandbox/container.py), booted once for this module at ``127.46.X.10``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sandbox import Sandbox, SandboxError, SandboxHost
from sandbox import host as sandbox_host_module
from sandbox.container import ContainerHost
from sandbox.units import free_port, incident_unit, wait_http_ok
from tests.support.node import FAST_KNOBS, UNIT, UNIT_PATH, CliRun, poll, remediate_argv, run_cli, sha256_text

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def containers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    reason = Sandbox.unavailable_reason()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("containers")
    fleet = Sandbox(
        workdir,
        3,
        first_address=sandbox_host_module.free_address_block(3, second_octet=46),
        name_prefix="ctr-",
        host_class=ContainerHost,
    )
    try:
        fleet.start()
    except SandboxError as exc:
        pytest.fail(f"container hosts did not start: {exc}")
    try:
        yield fleet
    finally:
        fleet.stop()


def serve(host: SandboxHost) -> int:
    """The incident's unit, started by systemctl3.py and healthy; earlier backups and locks gone. Its port."""
    port = free_port(host.address)
    host.run("systemctl", "stop", UNIT)
    host.sh(f"rm -rf /run/remediate {UNIT_PATH}.bak*")
    host.set_standin(**FAST_KNOBS)
    host.write(UNIT_PATH, incident_unit(host.address, port), mode=0o640)
    host.systemctl("daemon-reload", check=True)
    started = host.systemctl("start", UNIT)
    assert started.returncode == 0, started.stderr
    assert wait_http_ok(host.address, port), f"{host.name}: the stand-in did not come up"
    return port


def server_cmdline(host: SandboxHost) -> str:
    pid = host.run("systemctl", "show", UNIT, "-p", "MainPID").stdout.strip().removeprefix("MainPID=")
    return host.read(f"/proc/{pid}/cmdline").replace("\0", " ")


def lock_holders(host: SandboxHost) -> list[str]:
    """Every descriptor of every process on the host that names a lock under /run/remediate."""
    found = host.sh("find /proc/[0-9]*/fd -lname '/run/remediate/*' -printf '%p -> %l\\n' 2>/dev/null").stdout
    return found.splitlines()


def no_lock_left(host: SandboxHost) -> None:
    """The run's own lock holder lets go once its channel is closed (a moment after the CLI exits); then no
    process on the host may hold a lock descriptor. A leaked one never goes: the server holds it for good."""
    try:
        poll(lambda: not lock_holders(host), deadline=10, what=f"the locks of {host.name} to be let go")
    except AssertionError:
        raise AssertionError(f"{host.name}: lock descriptors still held: {lock_holders(host)}") from None


def cli(fleet: Sandbox, tmp_path: Path, *args: str) -> CliRun:
    argv = remediate_argv(*args, "--ssh-config", str(fleet.ssh_config), "--json")
    return run_cli(argv, cwd=tmp_path)


def test_the_host_is_container_style(containers: Sandbox) -> None:
    host = containers.hosts[0]
    assert host.read("/proc/1/cmdline").split("\0")[:3] == ["python3", "/usr/bin/systemctl3.py", "init"]
    assert "via systemctl.py 1.7.1097" in host.run("systemctl", "--version").stdout


def test_oom_again_rollback_status_as_on_systemd_and_no_lock_left(containers: Sandbox, tmp_path: Path) -> None:
    host = containers.hosts[0]
    serve(host)
    original = host.read(UNIT_PATH)

    first = cli(containers, tmp_path, "oom", host.name, "--lock-timeout", "1")
    assert first.returncode == 0 and first.result["outcome"] == "remediated", first
    assert "--mem-fraction-static 0.93" in host.read(UNIT_PATH)
    assert any("systemctl.py 1.7.1097, not systemd" in note for note in first.result["notes"]), first.result
    no_lock_left(host)
    # The server systemctl3.py forked from the commit script runs the new command line, holding no lock.
    assert "--mem-fraction-static 0.93" in server_cmdline(host)

    again = cli(containers, tmp_path, "oom", host.name, "--lock-timeout", "1")
    assert again.returncode == 0 and again.result["outcome"] == "unchanged", again
    no_lock_left(host)

    back = cli(containers, tmp_path, "rollback", host.name, "--lock-timeout", "1")
    assert back.returncode == 0, back
    assert sha256_text(host.read(UNIT_PATH)) == sha256_text(original)
    no_lock_left(host)

    status = cli(containers, tmp_path, "status", host.name)
    assert status.returncode == 0, status
    assert status.result["unit"] == UNIT
    no_lock_left(host)


def test_a_rollout_with_a_canary_and_a_rolled_back_host(containers: Sandbox, tmp_path: Path) -> None:
    hosts = containers.hosts
    originals = {}
    for host in hosts:
        serve(host)
        originals[host.name] = host.read(UNIT_PATH)
    bad = hosts[2]
    # Only the remediated command line misbehaves, so the rollback brings the old server back.
    bad.set_standin(**FAST_KNOBS, failure="never_healthy", failure_match="--chunked-prefill-size 4096")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "defaults": {"identity": str(containers.identity), "known_hosts": str(containers.known_hosts)},
                "hosts": {h.name: {"address": h.address} for h in hosts},
            }
        )
    )
    run = run_cli(
        remediate_argv(
            "oom", "all", "-i", str(inventory), "--canary", "1", "--batch", "2", "--max-failures", "1",
            "--wait-timeout", "5", "--lock-timeout", "1", "--json",
        ),
        cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 1, run
    doc = json.loads(run.stdout)
    outcome = {r["host"]: r["outcome"] for r in doc["results"]}
    assert outcome == {hosts[0].name: "remediated", hosts[1].name: "remediated", bad.name: "rolled_back"}, run
    assert doc["rollout"]["batches"][0] == [hosts[0].name]
    assert sha256_text(bad.read(UNIT_PATH)) == sha256_text(originals[bad.name])
    for host in hosts:
        no_lock_left(host)
    # Right after: every host's lock is free (a held one fails --lock-timeout 1).
    status = run_cli(remediate_argv("status", "all", "-i", str(inventory), "--json"), cwd=tmp_path)
    assert status.returncode == 0, status
    back = run_cli(
        remediate_argv("rollback", hosts[0].name, "-i", str(inventory), "--lock-timeout", "1", "--json"), cwd=tmp_path
    )
    assert back.returncode == 0, back
    assert sha256_text(hosts[0].read(UNIT_PATH)) == sha256_text(originals[hosts[0].name])


def test_a_drop_in_that_holds_the_command_is_the_file_oom_changes(containers: Sandbox, tmp_path: Path) -> None:
    """systemctl3.py shows no DropInPaths=: the probe finds UNIT.d/*.conf where systemctl3.py reads them."""
    host = containers.hosts[1]
    port = serve(host)
    unit = host.read(UNIT_PATH)
    command = unit[unit.index("ExecStart=") : unit.index("Restart=")]
    dropin = f"/etc/systemd/system/{UNIT}.d/50-command.conf"
    host.write(dropin, "[Service]\nExecStart=\n" + command.replace("0.94", "0.92"))
    host.systemctl("restart", UNIT, check=True)
    assert wait_http_ok(host.address, port)
    assert "--mem-fraction-static 0.92" in server_cmdline(host)  # systemctl3.py runs the drop-in's command

    run = cli(containers, tmp_path, "oom", host.name, "--lock-timeout", "1")
    assert run.returncode == 0 and run.result["outcome"] == "remediated", run
    assert "--mem-fraction-static 0.91" in host.read(dropin)
    assert host.read(UNIT_PATH) == unit  # the fragment's own ExecStart= is not the one that runs
    no_lock_left(host)


def test_a_crash_while_loading_is_seen_without_nrestarts_and_rolled_back(containers: Sandbox, tmp_path: Path) -> None:
    """No NRestarts, no auto-restart substate, no InvocationID: the dead server is seen from its state."""
    host = containers.hosts[2]
    port = serve(host)
    original = host.read(UNIT_PATH)
    # A load of ~4.5 s: the crash comes after systemctl3.py's own check of a simple start (it sleeps
    # MinimumYield, 0.5 s, then fails the restart if the process is gone), so the health wait is what sees it;
    # at FAST_KNOBS' ~0.5 s the two raced (seen in the full run: "simple start not active", rolled back all the same).
    host.set_standin(time_scale=0.01, failure="crash_during_load", failure_match="--chunked-prefill-size 4096")

    run = cli(containers, tmp_path, "oom", host.name, "--wait-timeout", "60", "--lock-timeout", "1")
    assert run.returncode == 1 and run.result["outcome"] == "rolled_back", run
    assert "not healthy after" not in run.result["error"], run.result["error"]  # seen, not timed out
    assert run.result["error"].startswith(f"{host.name}: {UNIT} failed while waiting for the server"), run
    assert host.read(UNIT_PATH) == original
    assert wait_http_ok(host.address, port)
    no_lock_left(host)
