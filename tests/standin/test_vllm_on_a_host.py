"""The vLLM stand-in as a systemd unit on a sandbox host: its journal, nvidia-smi, the 32k incident."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from remediate.core.engines.vllm.failures import RUNTIME_OOM, diagnose_vllm
from remediate.core.engines.vllm.startup import parse_vllm_startup
from remediate.core.unitfile.command import engine_in_exec

pytestmark = pytest.mark.integration

SMI = "/opt/sglang/standin/bin/nvidia-smi"
EXEC = (
    "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model standin/mha-13b-40k "
    "--gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --host {address} --port 8000"
)


def _wait(host, ok) -> None:
    deadline = time.monotonic() + 30
    while not ok():
        assert time.monotonic() < deadline, "\n".join(host.journal("vllm")[-20:])
        time.sleep(0.05)


def _health(host) -> int:
    try:
        with urllib.request.urlopen(f"http://{host.address}:8000/health", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
    except OSError:
        return 0


def test_the_32k_incident_as_a_unit(sandbox_host) -> None:
    host = sandbox_host
    host.set_standin(time_scale=0.001)
    exec_start = EXEC.format(address=host.address)
    assert engine_in_exec(exec_start) == "vllm"
    host.install_unit("vllm.service", f"[Unit]\nDescription=vLLM\n[Service]\nExecStart={exec_start}\n")
    _wait(host, lambda: _health(host) == 200)
    main_pid = host.systemctl("show", "-p", "MainPID", "--value", "vllm").stdout.strip()
    apps = host.run(SMI, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").stdout
    assert [line.split(", ")[0] for line in apps.splitlines()] == [main_pid], apps
    assert parse_vllm_startup(host.journal("vllm")).kv_tokens == 60720
    body = json.dumps({"prompt": [7] * 32000, "max_tokens": 8}).encode()
    request = urllib.request.Request(f"http://{host.address}:8000/v1/completions", data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as died:
        urllib.request.urlopen(request, timeout=10)
    assert died.value.code == 500
    died.value.close()
    _wait(host, lambda: host.systemctl("show", "-p", "ActiveState", "--value", "vllm").stdout.strip() == "failed")
    cause = diagnose_vllm(host.journal("vllm")).cause
    assert cause is not None and cause.kind == RUNTIME_OOM
