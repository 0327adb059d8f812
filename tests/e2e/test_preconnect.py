"""The TCP connection made before paramiko's import is the one the SSH session runs on (real sshd, the
sandbox's ssh_config: `Host gpu-N / HostName / Port`), and one made to the wrong place is never used."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.transport.base import SSHOptions
from remediate.transport.preconnect import Address, Preconnect, resolve
from remediate.transport.ssh import SSHTransport
from sandbox import Sandbox, SandboxHost

pytestmark = pytest.mark.e2e


def test_the_early_socket_carries_the_ssh_session(sandbox_fleet: Sandbox, sandbox_host: SandboxHost) -> None:
    options = SSHOptions(ssh_config=str(sandbox_fleet.ssh_config))
    where = resolve(sandbox_host.name, None, [Path(sandbox_fleet.ssh_config)])
    assert where == Address(sandbox_host.address, sandbox_host.port)
    pre = Preconnect(where, timeout=10)
    transport = SSHTransport(sandbox_host.name, options, label=sandbox_host.name)
    transport.preconnected(pre)
    assert pre._done.wait(10)  # noqa: SLF001 - connected: the socket the thread made, to compare below
    early = pre._sock  # noqa: SLF001
    assert early is not None
    transport.open()
    try:
        assert transport.run("echo ok").stdout == "ok\n"
        assert transport._conn.client.get_transport().sock is early  # noqa: SLF001
    finally:
        transport.close()


def test_a_socket_made_to_another_address_is_not_used(sandbox_fleet: Sandbox, sandbox_host: SandboxHost) -> None:
    options = SSHOptions(ssh_config=str(sandbox_fleet.ssh_config))
    other = next(h for h in sandbox_fleet.hosts if h is not sandbox_host)
    pre = Preconnect(Address(other.address, other.port), timeout=10)  # a wrong guess: another host's sshd
    transport = SSHTransport(sandbox_host.name, options, label=sandbox_host.name)
    transport.preconnected(pre)
    transport.open()
    try:
        assert transport.run("hostname").stdout.strip() == sandbox_host.name
        assert transport._conn.client.get_transport().sock.getpeername()[0] == sandbox_host.address  # noqa: SLF001
    finally:
        transport.close()
