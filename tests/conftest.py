"""Shared fixtures: a session-wide fleet of sandbox hosts (real systemd 252 in nspawn, real sshd), reset per test.

No test uses a systemd emulation: every fault the tests need is made real on these hosts (the sglang
stand-in crashes, hangs or never gets healthy on demand; tests edit files under the tool's feet).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxError, SandboxHost
from sandbox import host as sandbox_host_module

# Fixtures of tests/support/, for every test (the repository root is on sys.path: pyproject's ``pythonpath``).
pytest_plugins = ["tests.support.clock", "tests.support.webhook"]

FLEET_SIZE = int(os.environ.get("SANDBOX_FLEET_SIZE", "12"))  # the fleet rollout tests use 12


def free_address_block(n_hosts: int) -> str:
    """First address of n free loopback addresses (concurrent sessions each get their own block)."""
    return os.environ.get("SANDBOX_FIRST_ADDRESS") or sandbox_host_module.free_address_block(n_hosts)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start_time(pid: int) -> str | None:
    """The process's start time (with the PID, it names one process: PIDs get reused)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _describe(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return f"{pid} ({cmdline.strip()}, ppid {Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[1]})"
    except OSError:
        return f"{pid} (gone)"


@pytest.fixture(scope="session")
def sandbox_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """Twelve sandbox hosts (gpu-0 … gpu-11), started once per session and torn down at its end."""
    reason = Sandbox.unavailable_reason()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("sandbox")
    for attempt in range(3):  # another session may grab the same free block between our check and start
        fleet = Sandbox(workdir, FLEET_SIZE, first_address=free_address_block(FLEET_SIZE))
        try:
            fleet.start()
            break
        except SandboxError as exc:
            if attempt == 2 or "in use" not in str(exc):
                raise
    try:
        yield fleet
    finally:
        started = [(pid, _start_time(pid)) for pid in fleet.processes()]
        fleet.stop()
        survivors = [pid for pid, since in started if _alive(pid) and _start_time(pid) == since] + fleet.processes()
        assert not survivors, f"sandbox processes survived teardown: {[_describe(p) for p in survivors]}"


# The order files run in (make test: `--dist loadfile --no-loadscope-reorder` hands them out in this order): the
# sandbox/end-to-end files first, the thousands of short unit tests last, so that the workers end together. Left
# to itself xdist hands out the files with the most tests first, and the few long one-test e2e files last, one
# worker finishing them alone.
_FIRST = ("slow", "e2e", "integration")


def _rank(item: pytest.Item) -> int:
    return next((i for i, mark in enumerate(_FIRST) if item.get_closest_marker(mark)), len(_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each file at the rank of its heaviest test (a file stays in one piece for its module fixtures); stable."""
    ranks: dict[str, int] = {}
    for item in items:
        ranks[item.path.as_posix()] = min(ranks.get(item.path.as_posix(), len(_FIRST)), _rank(item))
    items.sort(key=lambda item: ranks[item.path.as_posix()])


_next = {"index": 0}


@pytest.fixture
def sandbox_host(sandbox_fleet: Sandbox) -> Iterator[SandboxHost]:
    """A freshly reset host (round-robin over the fleet); its services are killed afterwards."""
    host = sandbox_fleet.hosts[_next["index"] % len(sandbox_fleet.hosts)]
    _next["index"] += 1
    host.reset()
    yield host
    host.kill_services()


@pytest.fixture
def sandbox_hosts(sandbox_fleet: Sandbox) -> Iterator[list[SandboxHost]]:
    """Every host of the fleet, freshly reset (in parallel: each reset waits mostly on its host's systemd)."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda host: host.reset(), sandbox_fleet.hosts))
    yield sandbox_fleet.hosts
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda host: host.kill_services(), sandbox_fleet.hosts))


@pytest.fixture
def fresh_hosts(sandbox_fleet: Sandbox) -> Iterator[Callable[[int], list[SandboxHost]]]:
    """``fresh_hosts(n)``: the fleet's first n hosts, freshly reset (in parallel); their services are killed
    afterwards. For a test that needs a few hosts: :func:`sandbox_hosts` resets all twelve."""
    taken: list[SandboxHost] = []

    def take(n: int) -> list[SandboxHost]:
        hosts = sandbox_fleet.hosts[:n]
        assert len(hosts) == n, f"the fleet has {len(sandbox_fleet.hosts)} hosts, not {n}"
        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(lambda host: host.reset(), hosts))
        taken.extend(h for h in hosts if h not in taken)
        return hosts

    yield take
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda host: host.kill_services(), taken))


@pytest.fixture(autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """remediate's controller state (retry files, transaction records) goes to a temp dir, never ~/.local."""
    path = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(path))
    return path
