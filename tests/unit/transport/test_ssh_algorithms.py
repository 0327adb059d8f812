"""The SSH algorithms remediate offers: the fastest secure ones first, nothing paramiko supports dropped (a server
without them still negotiates), and the transport factory reaches every hop of the connection."""

from __future__ import annotations

import socket
from pathlib import Path

import paramiko

from remediate.transport import ssh, ssh_security
from remediate.transport.base import SSHOptions


def test_the_fast_transport_offers_x25519_and_aes_gcm_first_and_keeps_the_rest() -> None:
    left, right = socket.socketpair()
    try:
        fast = ssh_security.fast_transport(left).get_security_options()
        default = paramiko.Transport(right).get_security_options()
        assert fast.kex[0] == "curve25519-sha256@libssh.org"
        assert fast.ciphers[:2] == ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
        assert sorted(fast.kex) == sorted(default.kex) and sorted(fast.ciphers) == sorted(default.ciphers)
        assert fast.key_types == default.key_types  # host-key types untouched: known_hosts decides
    finally:
        left.close()
        right.close()


def test_the_fast_transport_turns_nagle_off_on_a_tcp_socket() -> None:
    """With Nagle on, each command round trip waited for the peer's delayed ACK: 40-50 ms for `true` over an
    open connection to a sandbox host, against 5 ms with TCP_NODELAY (measured, docs/internals/PERFORMANCE.md)."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
        ssh_security.fast_transport(client)
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        for s in (client, server, listener):
            s.close()


class _Recording(socket.socket):
    """A real socket that records the options set on it."""

    set_options: list[tuple[int, int, int]]

    def setsockopt(self, level: int, option: int, value: int) -> None:  # type: ignore[override]
        self.set_options.append((level, option, value))
        super().setsockopt(level, option, value)


def _recording(family: socket.AddressFamily) -> _Recording:
    sock = _Recording(family, socket.SOCK_STREAM)
    sock.set_options = []
    return sock


def test_a_socket_that_is_not_tcp_is_left_alone() -> None:
    unix = _recording(socket.AF_UNIX)  # a ProxyJump hop's channel is no TCP socket either
    try:
        ssh_security.no_delay(unix)
        assert unix.set_options == []  # no option set on it, not even one whose failure is swallowed
    finally:
        unix.close()
    ssh_security.no_delay(object())  # not a socket at all: no error


def test_a_tcp_socket_gets_nodelay() -> None:
    tcp = _recording(socket.AF_INET)
    try:
        ssh_security.no_delay(tcp)
        assert tcp.set_options == [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        assert tcp.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        tcp.close()


def test_preferences_unknown_to_paramiko_are_skipped() -> None:
    assert ssh_security.preferred_first(("nope", "b"), ("a", "b", "c")) == ("b", "a", "c")


def test_every_hop_connects_with_the_fast_transport(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host target\n  HostName 127.0.0.9\n  ProxyJump jump\nHost jump\n  HostName 127.0.0.8\n")
    transport = ssh.SSHTransport("target", SSHOptions(ssh_config=str(config)))
    hops = [transport._conn, transport._conn.gateway]
    assert all(hop.connect_kwargs["transport_factory"] is ssh_security.fast_transport for hop in hops)
