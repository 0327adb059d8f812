"""Fixtures of the e2e tests: a sandbox host as tests/support/node.py drives it, the incident's unit running on it,
the wheelhouse (tests/support/wheelhouse.py)."""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """remediate's wheel built from this tree, its dependencies' and pip's: what ``wheelhouse.install`` puts on
    a sandbox host (`--local`, the Ansible collection). Built once per session."""
    from tests.support.wheelhouse import build

    return build(tmp_path_factory.mktemp("wheels"))


@pytest.fixture(scope="session")
def collections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Ansible collections (remediate.serving and its old name's redirects) built and installed once a session."""
    return build_collections(tmp_path_factory.mktemp("collection"))
