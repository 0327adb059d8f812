"""The engine's version on sandbox hosts: `status` and `diagnose` show it with its source (the server's own
report, vLLM's startup line, the package in the unit's interpreter, listed as the unit's User=), and a rule keyed
on it (sglang 0.5.23 refuses the old --cuda-graph-max-bs: diagnose names the flag that release accepts)."""

from __future__ import annotations

import pytest

from sandbox.units import incident_unit
from tests.support.node import UNIT, Node, poll

pytestmark = pytest.mark.e2e

V23 = "Environment=SGLANG_STANDIN_VERSION=0.5.23\n"
SITE = "/opt/sglang/lib/python3.11/site-packages"  # the unit's interpreter is /opt/sglang/bin/python3
VLLM_UNIT = "vllm.service"


def _v23(node: Node, extra: str = "") -> str:
    text = incident_unit(node.host.address, node.port)
    text = text.replace("Environment=CUDA_HOME=/usr/local/cuda\n", "Environment=CUDA_HOME=/usr/local/cuda\n" + V23)
    return text.replace(f"--port {node.port}", f"--port {node.port}{extra}")


def test_sglang_0523_version_from_the_server_then_the_package_and_a_flag_it_refuses(node: Node) -> None:
    node.install(_v23(node))
    status = node.cli("status")
    assert status.returncode == 0, status
    assert status.result["engine_version"] == {"engine": "sglang", "version": "0.5.23", "source": "server"}
    human = node.cli("status", json_out=False)
    assert f"{node.host.name}: sglang 0.5.23 (server)" in human.stdout, human

    # The unit now writes the flag 0.5.23 no longer has (argparse: an ambiguous prefix, exit 2): it cannot start.
    node.host.sh(f"mkdir -p {SITE}/sglang-0.5.23.dist-info {SITE}/sglang_router-0.2.1.dist-info", check=True)
    node.install(_v23(node, " --cuda-graph-max-bs 160"), start=False)
    node.host.systemctl("restart", UNIT)
    poll(lambda: any("ambiguous option" in line for line in node.journal()), deadline=20, what="argparse's exit")
    why = node.cli("diagnose")
    assert why.returncode == 0, why
    assert why.result["engine_version"] == {"engine": "sglang", "version": "0.5.23", "source": "package"}
    assert any(n.startswith("--cuda-graph-max-bs: sglang 0.5.23 refuses it at startup") for n in why.result["notes"])
    assert "write --cuda-graph-max-bs-decode" in why.result["recommendation"]["reasons"][0], why.result
    human = node.cli("diagnose", json_out=False)
    assert "  engine: sglang 0.5.23 (package)" in human.stdout, human


def test_the_package_is_listed_as_the_units_user(node: Node) -> None:
    # root's 0700 directory holds the name: as User=deploy the listing cannot see it, so no version is claimed
    node.host.sh(f"mkdir -p -m 0700 /opt/sglang/lib && mkdir -p {SITE}/sglang-0.5.23.dist-info", check=True)
    node.install(_v23(node).replace("[Service]\n", "[Service]\nUser=deploy\n"), start=False)
    hidden = node.cli("status")
    assert hidden.returncode == 0, hidden
    assert "engine_version" not in hidden.result, hidden.result
    node.host.sh("chmod 0755 /opt/sglang/lib", check=True)
    seen = node.cli("status")
    assert seen.result["engine_version"] == {"engine": "sglang", "version": "0.5.23", "source": "package"}


def test_vllm_version_from_the_server_then_its_startup_line(node: Node) -> None:
    unit = (
        "[Unit]\nDescription=vLLM server (stand-in)\n\n[Service]\nEnvironment=VLLM_STANDIN_VERSION=0.11.0\n"
        "ExecStart=/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model standin/mha-13b-40k \\\n"
        f"    --host {node.host.address} --port {node.port}\n"
    )
    node.host.set_standin(time_scale=0.001)
    node.install(unit, name=VLLM_UNIT)
    status = node.cli("status", "--unit", VLLM_UNIT)
    assert status.returncode == 0, status
    assert status.result["engine_version"] == {"engine": "vllm", "version": "0.11.0", "source": "server"}
    node.host.systemctl("stop", VLLM_UNIT)
    why = node.cli("diagnose", "--unit", VLLM_UNIT)
    assert why.returncode == 0, why
    assert why.result["engine_version"] == {"engine": "vllm", "version": "0.11.0", "source": "log"}
