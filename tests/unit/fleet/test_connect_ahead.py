"""The first batch's connections start before the transaction's modules are imported (their handshakes overlap
the import); each host's work takes its own transport once; the rest connect in turn; what nobody took is
closed. And the SSH transport's background connect reports its failure where open() is called."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from remediate.errors import ConnectError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.jobs import ConnectAhead
from remediate.fleet.rollout import Strategy
from remediate.transport.base import SSHOptions
from remediate.transport.ssh import SSHTransport


class _Recorded:
    def __init__(self, name: str) -> None:
        self.host = name
        self.events: list[str] = []

    def open_ahead(self) -> None:
        self.events.append("ahead")

    def close(self) -> None:
        self.events.append("closed")


def _hosts(n: int) -> list[HostEntry]:
    return [HostEntry(name=f"gpu-{i}", address=f"root@127.0.0.{i + 1}") for i in range(n)]


def _factory(made: list[_Recorded]):  # type: ignore[no-untyped-def]
    def make(entry: HostEntry, options: SSHOptions) -> _Recorded:
        made.append(_Recorded(entry.name))
        return made[-1]

    return make


@pytest.mark.parametrize(
    ("strategy", "started"),
    [
        pytest.param(Strategy(canary=1, forks=10), 1, id="the-canary-only"),
        pytest.param(Strategy(canary=0, forks=3), 3, id="no-more-than-forks"),
        pytest.param(Strategy(canary=0, batch=("2",), forks=10), 2, id="the-first-batch"),
    ],
)
def test_only_the_first_batch_connects_ahead(strategy: Strategy, started: int) -> None:
    made: list[_Recorded] = []
    ConnectAhead(_factory(made)).start(_hosts(5), strategy, SSHOptions())
    assert [t.host for t in made] == [f"gpu-{i}" for i in range(started)]
    assert all(t.events == ["ahead"] for t in made)


def test_each_host_takes_its_transport_once_and_the_untaken_are_closed() -> None:
    made: list[_Recorded] = []
    hosts = _hosts(3)
    ahead = ConnectAhead(_factory(made)).start(hosts, Strategy(canary=0, forks=2), SSHOptions())
    first = ahead(hosts[0], SSHOptions())
    assert first is made[0]
    assert ahead(hosts[0], SSHOptions()) is not first  # taken once: a second run of that host connects anew
    late = ahead(hosts[2], SSHOptions())
    assert late.events == []  # beyond the first batch: connects when its work opens it
    ahead.close()
    assert made[1].events == ["ahead", "closed"] and first.events == ["ahead"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.integration
def test_a_background_connect_that_fails_raises_in_open(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    options = SSHOptions(known_hosts=str(known), connect_attempts=1, connect_timeout=5)
    transport = SSHTransport(f"root@127.0.0.1:{_closed_port()}", options)
    transport.open_ahead()
    with pytest.raises(ConnectError, match="refused"):
        transport.open()
    with pytest.raises(ConnectError, match="refused"):
        transport.open()  # no stale result: it connects again (and is refused again)
    transport.close()
