"""Bring-up and teardown of a separate sandbox: nothing it started survives; reset() cleans a host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxError
from sandbox.host import free_address_block

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
    fleet = Sandbox(tmp_path / "pair", 2, first_address=free_address_block(2, second_octet=45), name_prefix="t-")
    fleet.start()
    yield fleet
    fleet.stop()


def test_teardown_leaves_no_process_behind(pair):
    host = pair.hosts[0]
    host.install_unit("svc.service", "[Service]\nExecStart=/bin/sh -c 'sleep 1000 & exec sleep 1001'\n")
    host.run("sh", "-c", "setsid sleep 1002 < /dev/null > /dev/null 2>&1 &")
    started = pair.processes()
    assert len(started) >= 2 + 4  # 2 unshare + 2 sshd + supervisor, sh, sleeps
    pair.stop()
    assert [pid for pid in started if _alive(pid)] == []
    assert pair.processes() == []


def test_reset_kills_services_and_wipes_state(pair):
    host = pair.hosts[1]
    host.install_unit("svc.service", "[Service]\nExecStart=/bin/sleep 1001\n")
    host.write("/etc/systemd/system/svc.service.d/x.conf", "[Service]\nEnvironment=A=1\n")
    host.set_standin(time_scale=0.01, failure="exit")
    host.write("/var/lib/remediate/backups/svc.service", "old")
    host.write("/opt/other/file", "x")
    assert '"time_scale": 0.01' in host.run("cat", "/etc/sglang-standin.json").stdout
    host.reset()
    assert host.processes() == [host.pid]
    assert os.listdir(host.path("/etc/systemd/system")) == []
    assert host.run("test", "-e", "/etc/sglang-standin.json").returncode == 1
    assert host.run("test", "-e", "/var/lib/remediate").returncode == 1
    assert host.run("test", "-e", "/opt/other").returncode == 1
    assert host.run("test", "-x", "/opt/sglang/bin/python3").returncode == 0
    assert host.journal("svc") == [] and host.audit() == []
    assert host.run("systemctl", "list-units", "--all", "--no-legend").stdout == ""
    assert host.run("hostname").stdout.strip() == "t-1"
    mounts = host.run("cat", "/proc/self/mounts").stdout
    assert " /opt/sglang/standin " in mounts and " /usr/local/bin/.fake-systemd " in mounts


def test_an_address_in_use_is_refused(pair, tmp_path):
    clash = Sandbox(tmp_path / "clash", 1, first_address=pair.hosts[0].address)
    with pytest.raises(SandboxError, match="already in use"):
        clash.start()
    assert clash.processes() == []
