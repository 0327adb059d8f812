"""The single-host runner on a vLLM unit (scripted FakeTransport): the engine in the result, the pool read from
the startup lines when the unit is already remediated, --auto and --probe refused before anything is written."""

from __future__ import annotations

from fake_transport import incident_host

from remediate.host.options import BudgetOptions, RunOptions
from remediate.host.runner import remediate_host, status_host
from remediate.models import HostResult
from unit.host.test_runner_remediate import COMMIT, NOW, no_sleep  # noqa: F401 - no_sleep: autouse, no real naps

UNIT = "vllm.service"
PATH = f"/etc/systemd/system/{UNIT}"
ARGV = ["/usr/bin/vllm", "serve", "/models/m", "--port", "8001"]
REMEDIATED = (
    "[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
    "# remediate: oom 2026-12-04T06:00:00Z gpu-memory-utilization 0.95->0.94\n"
    "ExecStart=/usr/bin/vllm serve /models/m --port 8001 --gpu-memory-utilization 0.94 --max-num-batched-tokens 4096\n"
)
STARTED = (
    "(EngineCore_DP0 pid=41) INFO 12-04 06:00:09 [gpu_worker.py:298] Available KV cache memory: 48.54 GiB\n"
    "(EngineCore_DP0 pid=41) INFO 12-04 06:00:09 [kv_cache_utils.py:1087] GPU KV cache size: 63,616 tokens\n"
)


def _host(text: str = REMEDIATED, active: str = "active"):  # type: ignore[no-untyped-def]
    host = incident_host(text=text, unit=UNIT, path=PATH, argv=ARGV, active=active, journal=STARTED)
    host.on(r"environ", "@@none\n@@end\n")
    return host


def _run(host, **options: object) -> HostResult:  # type: ignore[no-untyped-def]
    return remediate_host(host, RunOptions(unit=UNIT, **options), now=lambda: NOW)  # type: ignore[arg-type]


def test_an_already_remediated_vllm_unit_is_unchanged_with_its_pool() -> None:
    host = _host()
    host.http("/health", 200)
    result = _run(host)
    assert result.outcome == "unchanged" and result.exit_code == 0, result.error
    assert result.extra["engine"] == "vllm" and result.max_total_num_tokens == 63616
    assert result.flags_before == {"gpu_memory_utilization": "0.94", "max_num_batched_tokens": "4096"}
    assert host.scripts("# remediate commit") == []
    assert all(call.path == "/health" for call in host.http_calls)  # no sglang /server_info
    assert all(call.port == 8001 for call in host.http_calls)


def test_auto_and_probe_are_refused_on_a_vllm_unit_before_any_write() -> None:
    for options in ({"auto": BudgetOptions()}, {"probe_tokens": 32000}):
        host = _host(REMEDIATED.replace("0.94", "0.95"), active="failed")
        result = _run(host, **options)
        assert result.exit_code == 2 and "not available for a vLLM unit" in (result.error or ""), result.error
        assert host.scripts("# remediate commit") == []


def test_status_names_the_engine_and_the_pool() -> None:
    host = _host()
    result = status_host(host, RunOptions(unit=UNIT), now=lambda: NOW)
    assert result.extra["engine"] == "vllm" and result.extra["remediated"] is True
    assert result.max_total_num_tokens == 63616
