"""What is verified on a real host: the container's published port, the running server's environment,
a running server that lacks the unit's settings (drift), and a --probe that fails without a crash."""

from __future__ import annotations

import pytest

from .conftest import UNIT_PATH, Node

pytestmark = pytest.mark.e2e

ALLOC = "PYTORCH_CUDA_ALLOC_CONF"
CONTAINER_PORT = 30000  # inside the container; the shim emulates -p by moving the server to the host port


def _docker_unit(node: Node, publish: str) -> str:
    return (
        "[Unit]\nDescription=SGLang in docker, published\n\n[Service]\n"
        "ExecStart=/usr/local/bin/docker run --rm --gpus all --name sglang --ipc=host "
        f"{publish} lmsysorg/sglang:v0.5.6 \\\n"
        "    python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 --trust-remote-code \\\n"
        f"    --host 0.0.0.0 --port {CONTAINER_PORT} --mem-fraction-static 0.94\n"
        "ExecStop=/usr/local/bin/docker stop sglang\n"
    )


def test_docker_published_port_is_where_the_wait_status_and_bench_look(node: Node) -> None:
    node.install(_docker_unit(node, f"-p {node.host.address}:{node.port}:{CONTAINER_PORT}"))

    run = node.cli("oom", "--wait-timeout", "30")

    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert run.result["max_total_num_tokens"] == 195011
    assert "--mem-fraction-static 0.93" in node.host.read(UNIT_PATH)
    assert node.server_env().get(ALLOC) == "expandable_segments:True"
    status = node.cli("status")
    assert status.returncode == 0, status
    assert status.result["max_total_num_tokens"] == 195011, status


def test_docker_without_a_published_port_fails_early_with_one_line(node: Node) -> None:
    unit = (
        _docker_unit(node, "")
        .replace("--host 0.0.0.0", f"--host {node.host.address}")
        .replace(f"--port {CONTAINER_PORT}", f"--port {node.port}")
    )
    node.install(unit)
    before = node.sha(UNIT_PATH)

    run = node.cli("oom", "--wait-timeout", "30", json_out=False)

    assert run.returncode == 2, run
    assert f"the server's port {node.port} in the container is not published" in run.stdout + run.stderr, run
    assert node.sha(UNIT_PATH) == before, "nothing may be written"
    assert node.backups(UNIT_PATH) == []
