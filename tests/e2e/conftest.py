"""Fixtures of the e2e tests: a sandbox host as tests/support/node.py drives it, the incident's unit running on it,
the wheelhouse (tests/support/wheelhouse.py)."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxHost
from sandbox.units import free_port
from tests.support.ansible_play import build_collections
from tests.support.node import FAST_KNOBS, Node


@pytest.fixture
def node(sandbox_fleet: Sandbox, sandbox_host: SandboxHost, tmp_path: Path) -> Iterator[Node]:
    """A freshly reset sandbox host with fast stand-in knobs (a load takes ~0.5 s)."""
    sandbox_host.set_standin(**FAST_KNOBS)
    n = Node(sandbox_fleet, sandbox_host, tmp_path, free_port(sandbox_host.address))
    try:
        yield n
    finally:
        n.cleanup()


@pytest.fixture
def incident(node: Node) -> Node:
    """A host running the incident's unit (0.94, no chunking, no alloc conf), healthy."""
    node.install_incident()
    return node


def _once_per_run(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(dir)`` once for the whole run: under xdist (``make test``) the workers share one copy in the run's
    temp dir, the first to come builds it under a lock while the others wait; alone, a temp dir of the session."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(factory.mktemp(name))
    shared = factory.getbasetemp().parent / name  # /tmp/pytest-of-USER/pytest-N/: this run's, every worker's
    with open(shared.with_name(name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared.with_name(name + ".done")
        if done.exists():
            return Path(done.read_text())
        shutil.rmtree(shared, ignore_errors=True)  # a worker's failed try: the next starts over
        shared.mkdir()
        built = build(shared)
        done.write_text(str(built))
        return built


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """remediate's wheel built from this tree, its dependencies' and pip's: what ``wheelhouse.install`` puts on
    a sandbox host (`--local`, the Ansible collection). Built once per run (the xdist workers share it)."""
    from tests.support.wheelhouse import build

    return _once_per_run(tmp_path_factory, "wheels", build)


@pytest.fixture(scope="session")
def collections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Ansible collections (remediate.serving and its old name's redirects) built and installed once a run."""
    return _once_per_run(tmp_path_factory, "collection", build_collections)
