"""The health wait through the engine seam: vLLM has no document with its pool, so after /health 200 the wait
reads this start's journal for ``GPU KV cache size`` (and never asks for sglang's /server_info)."""

from __future__ import annotations

from remediate.core.engines import VLLM
from remediate.host.common.health import wait_healthy
from tests.support.clock import Naps
from tests.support.hosts import waiting_host

UNIT = "vllm.service"
POLL = r"\Asystemctl show"
STARTED = (
    "(EngineCore_DP0 pid=41) INFO 12-04 03:20:01 [gpu_worker.py:298] Available KV cache memory: 48.54 GiB\n"
    "(EngineCore_DP0 pid=41) INFO 12-04 03:20:01 [kv_cache_utils.py:1087] GPU KV cache size: 63,616 tokens\n"
)


def test_vllm_capacity_comes_from_the_journal_after_health(naps: Naps) -> None:
    host = waiting_host(None, 503, 200, journal=[STARTED])
    healthy = wait_healthy(
        host,
        UNIT,
        ("127.0.0.1", 8000),
        timeout=60,
        restart_epoch=1764800000,
        invocation_id="inv-2",
        engine=VLLM,
        sleep=naps,
    )
    assert (healthy.tokens, healthy.source, healthy.info) == (63616, "journal", None)
    assert {c.path for c in host.http_calls} == {"/health"}  # no /server_info, /get_server_info
    assert any("--since @1764800000" in c.command for c in host.ran(r"\Ajournalctl"))


def test_vllm_healthy_without_the_line_keeps_waiting_for_it(naps: Naps) -> None:
    host = waiting_host(
        200, 200, journal=["INFO 12-04 03:20:00 [api_server.py:1839] vLLM API server version 0.11.0\n", STARTED]
    )
    healthy = wait_healthy(host, UNIT, ("127.0.0.1", 8000), timeout=60, restart_epoch=None, engine=VLLM, sleep=naps)
    assert healthy.tokens == 63616 and healthy.polls == 2


def test_vllm_without_the_line_reads_the_pool_from_metrics(naps: Naps) -> None:
    # vllm/v1/metrics/loggers.py log_metrics_info: vllm:cache_config_info, num_gpu_blocks x block_size
    host = waiting_host(200, journal=["INFO 12-04 03:20:00 [api_server.py:1839] vLLM API server version 0.11.0\n"])
    host.http("/metrics", (200, 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="3976"} 1.0\n'))
    healthy = wait_healthy(host, UNIT, ("127.0.0.1", 8000), timeout=60, restart_epoch=None, engine=VLLM, sleep=naps)
    assert (healthy.tokens, healthy.source, healthy.polls) == (3976 * 16, "/metrics", 1)
