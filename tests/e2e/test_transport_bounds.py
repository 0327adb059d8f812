"""SSHTransport on a real sandbox host: a command's output is capped and an HTTP answer has a total deadline."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from remediate.errors import ConnectionLost, TransportError
from remediate.transport.base import MAX_OUTPUT_BYTES, SSHOptions
from remediate.transport.ssh import SSHTransport
from tests.support.node import Node, poll
from tests.support.squatter import SQUATTER, SQUATTER_UNIT
from tests.support.squatter import SQUATTER_SCRIPT as _SQUATTER

pytestmark = pytest.mark.e2e


@pytest.fixture
def ssh(node: Node) -> Iterator[SSHTransport]:
    transport = SSHTransport(node.host.name, SSHOptions(ssh_config=str(node.fleet.ssh_config)), label="gpu-x")
    try:
        yield transport
    finally:
        transport.close()


def test_a_runaway_commands_output_is_capped_naming_the_host_and_the_command(ssh: SSHTransport) -> None:
    size = MAX_OUTPUT_BYTES + (16 << 20)
    with pytest.raises(TransportError, match=rf"gpu-x: `head -c {size} /dev/zero`: more than {MAX_OUTPUT_BYTES} bytes"):
        ssh.run(f"head -c {size} /dev/zero")
    assert ssh.run("echo still usable").stdout == "still usable\n"  # the connection survives the cut-off command


def test_a_command_past_its_timeout_is_connection_lost_naming_it(ssh: SSHTransport) -> None:
    with pytest.raises(ConnectionLost, match=r"gpu-x: `sleep 30`: timed out after 1s"):
        ssh.run("sleep 30", timeout=1)


@pytest.fixture
def trickler(node: Node) -> Iterator[Node]:
    node.host.write(SQUATTER, _SQUATTER)
    started = node.host.run(
        "/usr/bin/systemd-run", f"--unit={SQUATTER_UNIT}", "--quiet", "/usr/bin/python3", SQUATTER,
        node.host.address, str(node.port), "trickle",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    yield node
    node.host.systemctl("stop", SQUATTER_UNIT)


def test_http_get_from_a_trickling_peer_ends_at_its_total_deadline(trickler: Node, ssh: SSHTransport) -> None:
    def answered() -> object:
        response = ssh.http_get(trickler.host.address, trickler.port, "/health", timeout=2)
        refused = response.error and "connect failed" in response.error.lower()  # not listening yet
        return None if refused else response

    response = poll(answered, deadline=30, what="the trickling peer")  # once it listens: cut at 2 s, not hung
    assert response.status is None
    assert "no complete answer within 2s" in response.error
