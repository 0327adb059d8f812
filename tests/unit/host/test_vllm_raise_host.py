"""`diagnose` on a vLLM unit whose start found no memory for the KV cache: the number to raise
--gpu-memory-utilization to, from the start's own lines and nvidia-smi's total (read in the probe's round trip)."""

from __future__ import annotations

from tests.support.hosts import diagnose_host as host
from tests.support.hosts import diagnose_one as run
from tests.support.journals import FAILED_AT_050

UNIT = "[Service]\nExecStart=/usr/bin/vllm serve /models/m --port 8001 --gpu-memory-utilization 0.50\n"
ARGV = ["/usr/bin/vllm", "serve", "/models/m", "--port", "8001", "--gpu-memory-utilization", "0.50"]


def test_the_050_host_gets_a_number_above_050_when_nvidia_smi_gives_the_total() -> None:
    result = run(host(FAILED_AT_050, gpus=["0, 81559, 612"], argv=ARGV, text=UNIT))
    assert result["engine"] == "vllm"
    rec = result["recommendation"]
    assert rec["kind"] == "no-cache-memory" and rec["blocking"] is True
    assert rec["other_flags"] == {"--gpu-memory-utilization": "0.53"}
    blind = run(host(FAILED_AT_050, argv=ARGV, text=UNIT))["recommendation"]  # nvidia-smi absent
    assert blind["other_flags"] == {} and any("card's total memory is unknown" in r for r in blind["reasons"])
