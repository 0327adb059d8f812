"""The stand-in and its nvidia-smi inside a sandbox host (the host's python3, /run, a systemd unit)."""

from __future__ import annotations

import time
import urllib.request

import pytest

pytestmark = pytest.mark.integration

SMI = "/opt/sglang/standin/bin/nvidia-smi"
UNIT = (
    "[Unit]\nDescription=SGLang\n[Service]\n"
    "ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.6 --tp 8 \\\n"
    "  --mem-fraction-static 0.93 --chunked-prefill-size 4096 --host {address} --port 30000\n"
)


def _healthy(host) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{host.address}:30000/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, "\n".join(host.journal("sglang")[-20:])
        time.sleep(0.05)


def test_nvidia_smi_on_a_host_sees_the_unit_and_a_neighbour(sandbox_host) -> None:
    host = sandbox_host
    idle = host.run(SMI, "--query-gpu=index,memory.total,memory.used", "--format=csv,noheader,nounits")
    assert idle.returncode == 0 and idle.stdout.splitlines()[0] == "0, 97865, 0", idle
    host.set_standin(time_scale=0.001, warmup_s=1, neighbour={"pid": 4242, "gib": 1.5, "gpus": [6]})
    host.install_unit("sglang.service", UNIT.format(address=host.address))
    _healthy(host)
    main_pid = host.systemctl("show", "-p", "MainPID", "--value", "sglang").stdout.strip()
    apps = host.run(SMI, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").stdout
    pids = [line.split(", ")[0] for line in apps.splitlines()]
    assert pids.count(main_pid) == 8 and pids.count("4242") == 1, apps
    assert any("TP6] Load weight begin. avail mem=90.12 GB" in line for line in host.journal("sglang"))
    host.systemctl("stop", "sglang", check=True)
    after = host.run(SMI, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").stdout
    assert after.splitlines() == ["4242, 1536"], after
