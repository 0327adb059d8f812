"""Bring-up and teardown of a separate sandbox: nothing it started survives; reset() cleans a host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxError, cgroups
from sandbox.host import address_free, free_address_block

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def pair(tmp_path):
    reason = Sandbox.unavailable_reason()
    if reason:
        pytest.skip(reason)
    fleet = Sandbox(tmp_path / "pair", 2, first_address=free_address_block(2, second_octet=44), name_prefix="t-")
    fleet.start()
    yield fleet
    fleet.stop()


def test_teardown_leaves_no_process_behind(pair):
    host = pair.hosts[0]
    host.install_unit("svc.service", "[Service]\nExecStart=/bin/sh -c 'sleep 1000 & exec sleep 1001'\n")
    host.run("sh", "-c", "setsid sleep 1002 < /dev/null > /dev/null 2>&1 &")
    started = pair.processes()
    assert len(started) >= 2 * 4 + 3  # 2 × (nspawn, systemd, journald, sshd …) + sh, sleeps
    pair.stop()
    assert [pid for pid in started if _alive(pid)] == []
    assert pair.processes() == []
    mounts = Path("/proc/self/mounts").read_text()
    assert str(pair.workdir) not in mounts
    leftovers = [p for h in pair.hosts for p in cgroups.group_dirs(h.cgroup) if p.exists()]
    assert leftovers == []
    assert all(address_free(h.address) for h in pair.hosts)
    pair.stop()  # idempotent


def test_leftovers_of_a_dead_run_are_swept_at_the_next_start(tmp_path):
    """A run killed with SIGKILL leaves its hosts running; the next start kills them by PID and removes them."""
    first = free_address_block(1, 44)
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from sandbox import Sandbox\n"
        f"fleet = Sandbox({str(tmp_path / 'dead')!r}, 1, first_address={first!r}, name_prefix='d-')\n"
        "fleet.start()\n"
        "print(fleet.hosts[0].cgroup, fleet.hosts[0].pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    cgroup, pid = run.stdout.split()
    assert _alive(int(pid)), run.stderr  # the dead run's host lives on
    assert cgroup in cgroups.sweep_dead()
    assert not _alive(int(pid))
    assert [p for p in cgroups.group_dirs(cgroup) if p.exists()] == []


def test_reset_kills_services_and_wipes_state(sandbox_host):
    host = sandbox_host  # a host of the session's fleet: reset() is what every test's fixture runs on it
    host.install_unit("svc.service", "[Service]\nExecStart=/bin/sleep 1001\n")
    host.write("/etc/systemd/system/svc.service.d/x.conf", "[Service]\nEnvironment=A=1\n")
    host.set_standin(time_scale=0.01, failure="exit")
    host.write("/var/lib/remediate/backups/svc.service", "old")
    host.write("/opt/other/file", "x")
    assert '"time_scale": 0.01' in host.run("cat", "/etc/sglang-standin.json").stdout
    before = set(os.listdir(host.path("/etc/systemd/system")))
    host.reset()
    assert host.systemctl("is-active", "svc").stdout.strip() in ("inactive", "unknown")
    assert "svc.service" not in host.run("systemctl", "list-units", "--all", "--no-legend", "--plain").stdout
    assert set(os.listdir(host.path("/etc/systemd/system"))) == before - {"svc.service", "svc.service.d"}
    assert host.run("test", "-e", "/etc/sglang-standin.json").returncode == 1
    assert host.run("test", "-e", "/var/lib/remediate").returncode == 1
    assert host.run("test", "-e", "/opt/other").returncode == 1
    assert host.run("test", "-x", "/opt/sglang/bin/python3").returncode == 0
    assert host.journal("svc") == [] and host.audit() == []
    assert host.run("hostname").stdout.strip() == host.name
    assert host.systemctl("is-system-running").stdout.strip() == "running"
    mounts = host.run("cat", "/proc/self/mounts").stdout
    assert " /opt/sglang/standin " in mounts


def test_an_address_in_use_is_refused(sandbox_fleet, tmp_path):
    clash = Sandbox(tmp_path / "clash", 1, first_address=sandbox_fleet.hosts[0].address)
    with pytest.raises(SandboxError, match="already in use"):
        clash.start()
    assert clash.processes() == []
