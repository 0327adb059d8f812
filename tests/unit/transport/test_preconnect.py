"""The TCP connection started before paramiko's import: where ssh_config plainly says (paramiko's reading: first
value wins, Host patterns with negation), nowhere where it is not plain; adopted by the SSH transport only when
Fabric resolves the same address. Real sockets on loopback."""

from __future__ import annotations

import socket
from pathlib import Path

import paramiko
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.transport.preconnect import Address, Preconnect, resolve


def _config(tmp_path: Path, text: str) -> list[Path]:
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return [path, tmp_path / "absent"]


@pytest.mark.parametrize(
    ("target", "port", "text", "expected"),
    [
        pytest.param("root@10.0.0.5", None, "", Address("10.0.0.5", 22), id="no-config"),
        pytest.param("root@10.0.0.5:2222", None, "", Address("10.0.0.5", 2222), id="port-in-the-target"),
        pytest.param("gpu-1", 2200, "", Address("gpu-1", 2200), id="port-option"),
        pytest.param("gpu-1", None, "Host gpu-*\n  HostName %h.%p.dc\n", None, id="token-other-than-h"),
        pytest.param(
            "gpu-1",
            None,
            "Host gpu-1\n  HostName 127.42.0.10\nHost *\n  HostName 10.9.9.9\n  Port 2022\n",
            Address("127.42.0.10", 2022),
            id="first-value-wins",
        ),
        pytest.param("gpu-1", None, "Host * !gpu-1\n  HostName 10.9.9.9\n", Address("gpu-1", 22), id="negated-pattern"),
        pytest.param("gpu-1", None, "Port=2200\nHost other\n  Port 1\n", Address("gpu-1", 2200), id="global-eq"),
        pytest.param("gpu-1", None, "Host gpu-1\n  HostName %h.dc\n", Address("gpu-1.dc", 22), id="percent-h"),
        pytest.param("gpu-1", None, "Host gpu-1\n  ProxyJump bastion\n", None, id="proxyjump"),
        pytest.param("gpu-1", None, "Host *\n  ProxyCommand ssh -W %h:%p b\n", None, id="proxycommand"),
        pytest.param("gpu-1", None, "Host other\n  ProxyJump bastion\n", Address("gpu-1", 22), id="proxy-elsewhere"),
        pytest.param("gpu-1", None, "Match host gpu-1\n  HostName 10.1.1.1\n", None, id="match"),
        pytest.param("gpu-1", None, "Include ~/.ssh/conf.d/*\n", None, id="include"),
        pytest.param("gpu-1", None, "Host *\n  CanonicalizeHostname yes\n", None, id="canonical"),
        pytest.param("gpu-1", None, "Host gpu-1\n  Port twenty\n", None, id="bad-port"),
        pytest.param("root@h:22", 2200, "", None, id="port-twice-fabric-refuses"),
        pytest.param("fe80::1", None, "", Address("fe80::1", 22), id="ipv6"),
    ],
)
def test_where_ssh_config_plainly_says(
    tmp_path: Path, target: str, port: int | None, text: str, expected: Address | None
) -> None:
    assert resolve(target, port, _config(tmp_path, text)) == expected


def test_a_preconnected_socket_is_handed_over_only_where_fabric_resolved() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        pre = Preconnect(Address("127.0.0.1", port), timeout=5)
        assert pre.take("127.0.0.2", port) is None  # Fabric resolved elsewhere: closed unused
        pre = Preconnect(Address("127.0.0.1", port), timeout=5)
        sock = pre.take("127.0.0.1", port)
        assert sock is not None and sock.getpeername() == ("127.0.0.1", port)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert pre.take("127.0.0.1", port) is None  # once
        sock.close()
    finally:
        listener.close()


def test_a_refused_preconnect_hands_over_nothing() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pre = Preconnect(Address("127.0.0.1", port), timeout=5)
    assert pre.take("127.0.0.1", port) is None  # the transport connects, and reports the refusal, itself
    pre.close()


_PATTERNS = st.sampled_from(["*", "gpu-*", "gpu-1", "!gpu-1", "!gpu-2", "gpu-?", "other", "10.0.0.*"])
_SETTINGS = st.sampled_from(["HostName 10.1.1.1", "HostName %h.dc", "Port 2022", "Port=2200", "User root", ""])
_BLOCKS = st.lists(st.tuples(st.lists(_PATTERNS, min_size=1, max_size=3), st.lists(_SETTINGS, max_size=3)), max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    prelude=st.lists(_SETTINGS, max_size=2),
    blocks=_BLOCKS,
    target=st.sampled_from(["gpu-1", "gpu-2", "10.0.0.7", "other"]),
)
def test_where_it_connects_is_where_paramiko_resolves(
    tmp_path_factory: pytest.TempPathFactory, prelude: list[str], blocks: list[tuple[list[str], list[str]]], target: str
) -> None:
    lines = [*prelude]
    for patterns, values in blocks:
        lines += ["Host " + " ".join(patterns), *(f"  {v}" for v in values)]
    text = "\n".join(lines) + "\n"
    path = tmp_path_factory.mktemp("cfg") / "ssh_config"
    path.write_text(text)
    got = resolve(target, None, [path])
    looked = paramiko.SSHConfig.from_text(text).lookup(target)
    assert got == Address(looked["hostname"], int(looked.get("port", 22))), text
