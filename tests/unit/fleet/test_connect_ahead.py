"""The first batch's connections start before the transaction's modules are imported (their handshakes overlap
the import); each host's work takes its own transport once; the rest connect in turn; what nobody took is
closed. The read-only fan-out connects ahead the same way. And the SSH transport's background connect
reports its failure where open() is called."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from remediate import api
from remediate.errors import ConfigError, ConnectError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.jobs import ConnectAhead
from remediate.fleet.rollout import Strategy
from remediate.transport.base import SSHOptions
from remediate.transport.ssh import SSHTransport
from tests.support.fake_transport import FakeTransport
from tests.support.hosts import incident_host


class _Recorded:
    def __init__(self, name: str) -> None:
        self.host = name
        self.events: list[str] = []

    def open_ahead(self) -> None:
        self.events.append("ahead")

    def close(self) -> None:
        self.events.append("closed")


def _entries(n: int) -> list[HostEntry]:
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
    ConnectAhead(_factory(made)).start(_entries(5), strategy, SSHOptions())
    assert [t.host for t in made] == [f"gpu-{i}" for i in range(started)]
    assert all(t.events == ["ahead"] for t in made)


def test_each_host_takes_its_transport_once_and_the_untaken_are_closed() -> None:
    made: list[_Recorded] = []
    hosts = _entries(3)
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


# -- the read-only fan-out (`status`, `diagnose`, `plan`, `backups`): connected ahead like `oom` ---------------


class _Hosts:
    """A transport factory of scripted incident hosts, one per host and call, all kept to look at."""

    def __init__(self, *, refuse: str | None = None) -> None:
        self.made: list[FakeTransport] = []
        self.refuse = refuse  # a host whose transport cannot be made (bad input found per host)

    def __call__(self, entry: HostEntry, options: SSHOptions) -> FakeTransport:
        if entry.name == self.refuse:
            raise ConfigError(f"{entry.name}: no such identity file")
        fake = incident_host(entry.name, active="active", MainPID=42)
        fake.http("/server_info", (200, json.dumps({"max_total_num_tokens": 209007})))
        self.made.append(fake)
        return fake

    def of(self, name: str) -> list[FakeTransport]:
        return [t for t in self.made if t.host == name]


def test_status_connects_its_first_forks_hosts_ahead_and_each_host_runs_on_its_own() -> None:
    hosts = _Hosts()
    results = api.status(api.StatusRequest(targets=("root@a", "root@b", "root@c"), forks=2), transport_factory=hosts)
    assert [r.host for r in results] == ["root@a", "root@b", "root@c"] and all(r.ok for r in results)
    # One transport per host: the first two were opened ahead and their work ran on them; the third
    # connected when its turn came.
    assert sorted(t.host for t in hosts.made) == ["root@a", "root@b", "root@c"]
    assert [t.opened_ahead for t in hosts.made[:2]] == [1, 1] and hosts.of("root@c")[0].opened_ahead == 0
    assert all(t.calls and t.closed == 1 for t in hosts.made)


def test_the_read_only_fan_out_runs_the_inventory_s_forks_at_once_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    inventory = tmp_path / "inventory.yaml"
    names = [f"gpu-{i}" for i in range(4)]
    doc = {"rollout": {"forks": 3}, "hosts": {n: {"address": f"192.0.2.{i + 1}"} for i, n in enumerate(names)}}
    inventory.write_text(yaml.safe_dump(doc))
    hosts = _Hosts()
    results = api.diagnose(api.DiagnoseRequest(targets=("all",), inventory=str(inventory)), transport_factory=hosts)
    assert [r.host for r in results] == names
    ahead = {t.host for t in hosts.made if t.opened_ahead}
    assert ahead == set(names[:3])  # rollout: forks: 3 of the inventory
    assert all(t.closed == 1 for t in hosts.made)


def test_a_host_whose_transport_cannot_be_made_ahead_is_its_own_result() -> None:
    hosts = _Hosts(refuse="root@b")
    results = api.status(api.StatusRequest(targets=("root@a", "root@b")), transport_factory=hosts)
    by_host = {r.host: r for r in results}
    assert by_host["root@a"].ok
    assert not by_host["root@b"].ok and by_host["root@b"].exit_code == 2 and "identity" in str(by_host["root@b"].error)
    assert all(t.closed == 1 for t in hosts.made)


def test_a_bug_while_connecting_ahead_closes_what_was_already_started() -> None:
    made: list[_Recorded] = []

    def make(entry: HostEntry, options: SSHOptions) -> _Recorded:
        if entry.name == "gpu-1":
            raise RuntimeError("a bug")
        return _factory(made)(entry, options)

    with pytest.raises(RuntimeError, match="a bug"):
        ConnectAhead(make).start(_entries(3), Strategy(canary=0, forks=3), SSHOptions())
    assert [t.events for t in made] == [["ahead", "closed"]]


def test_the_read_only_jobs_load_their_host_module_after_the_connections_are_started() -> None:
    """The handshakes overlap the import of the job's host module: when the first transport is opened ahead,
    `status`'s host module (host/status/status.py) is not loaded yet (a fresh interpreter: nothing loaded it before)."""
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})
from tests.support.fake_transport import FakeTransport
from remediate import api
loaded = []
class Recording(FakeTransport):
    def open_ahead(self):
        loaded.append("remediate.host.status.status" in sys.modules)
        super().open_ahead()
results = api.status(api.StatusRequest(targets=("root@a", "root@b")), transport_factory=lambda e, o: Recording(e.name))
print(json.dumps([loaded, "remediate.host.status.status" in sys.modules, "remediate.fleet.bench" in sys.modules]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=True)
    loaded, runner_after, bench_loaded = json.loads(run.stdout.splitlines()[-1])
    assert loaded == [False, False]  # both connections were under way before the job's module loaded
    assert runner_after is True  # and then the job loaded it
    assert bench_loaded is False  # `status` does not load the sweep's modules (api/bench_cmd.py)
