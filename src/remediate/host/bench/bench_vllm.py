"""The sweep's requests to a vLLM server (read-only): its limits, the prefix-cache reset, one streamed
``/v1/completions`` of exact token ids.

vllm/entrypoints/openai/api_server.py: ``GET /v1/models`` (each card's ``max_model_len``), ``GET /metrics``
(``vllm:cache_config_info``: ``num_gpu_blocks`` × ``block_size`` is the pool), ``POST /reset_prefix_cache`` (only
with ``VLLM_SERVER_DEV_MODE``, else 404), ``POST /v1/completions``. The loop over lengths, the checks and the
dead-server report are host/bench/bench.py's, the same as for sglang.
"""

from __future__ import annotations

import json
from typing import Any

from remediate.core.bench.latency import RequestMetrics
from remediate.core.bench.openai import as_generate_chunks, completions_body
from remediate.core.bench.sweep import ServerLimits
from remediate.core.engines.vllm.capacity import parse_cache_config
from remediate.core.probe import ProbeResult
from remediate.errors import RemediationError
from remediate.host.bench.server import Server
from remediate.host.common.facts import fetch_json, read_streamed
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import endpoint_of
from remediate.host.plan.budget_vllm import models_max_len
from remediate.transport.base import Transport
from remediate.transport.http1 import HttpStream

RESET_PATH = "/reset_prefix_cache"
NO_RESET_NOTE = (
    "prefix cache not reset (POST /reset_prefix_cache answered 404: the server runs without VLLM_SERVER_DEV_MODE); "
    "every prompt is unique, and cached_tokens is checked where the server reports it"
)


class VllmBench:
    """vLLM: ``/v1/models`` and ``/metrics`` for the limits, ``POST /reset_prefix_cache``, ``/v1/completions``."""

    def endpoint(self, found: ProbeResult, options: RunOptions) -> tuple[str, int]:
        return endpoint_of(found, options)

    def server(
        self,
        transport: Transport,
        endpoint: tuple[str, int],
        *,
        label: str,
        gen: int,
        timeout: float,
        info: dict[str, Any] | None = None,
    ) -> Server:
        # ``info`` (sglang's /server_info) does not apply: vLLM's limits are /v1/models' and /metrics'
        limits, shown, model = vllm_limits(transport, *endpoint, label=label)
        return Server(
            limits,
            shown,
            lambda: reset_prefix_cache(transport, *endpoint),
            lambda ids: send_completion(transport, endpoint, ids, gen, model, timeout),
        )

    def running_context(self, transport: Transport, endpoint: tuple[str, int]) -> tuple[int | None, str]:
        longest = models_max_len(fetch_json(transport, *endpoint, "/v1/models")[0])
        return (longest, "the running server's /v1/models") if longest else (None, "")


def vllm_limits(
    transport: Transport, host: str, port: int, *, label: str | None = None
) -> tuple[ServerLimits, dict[str, Any], str | None]:
    """What the server accepts: ``max_model_len`` (``/v1/models``) and its pool (``/metrics``); the info the
    sweep's result shows, and the served model's name."""
    models, _ = fetch_json(transport, host, port, "/v1/models")
    if models is None:
        raise RemediationError(
            label or transport.host, f"the vLLM server at {host}:{port} does not answer /v1/models; is it up?"
        )
    data = models.get("data")
    card = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    name = card.get("id") if isinstance(card.get("id"), str) else None
    metrics = transport.http_get(host, port, "/metrics")
    cache = parse_cache_config(metrics.body.decode("utf-8", "replace") if metrics.status == 200 else "")
    max_model_len = models_max_len(models)
    info = {
        "engine": "vllm",
        "model": name,
        "max_model_len": max_model_len,
        "num_gpu_blocks": cache.num_gpu_blocks,
        "block_size": cache.block_size,
        "gpu_memory_utilization": cache.gpu_memory_utilization,
    }
    # vLLM accepts prompt + max_tokens up to max_model_len (serving_engine.py _validate_input): the context limit
    return ServerLimits(max_total_num_tokens=cache.tokens, context_length=max_model_len), info, name


def reset_prefix_cache(transport: Transport, host: str, port: int) -> tuple[str, str]:
    """("ok", "") when reset; ("note", why) when the server has no reset; ("failed", why) when it does not answer."""
    answer = transport.http_post(host, port, RESET_PATH)
    if answer.status is None:
        return "failed", f"no answer to POST {RESET_PATH}: {answer.error or 'refused'}"
    if answer.status == 404:
        return "note", NO_RESET_NOTE
    if answer.status != 200:
        return "note", f"{RESET_PATH} answered {answer.status} (not reset; unique prompts miss the cache anyway)"
    return "ok", ""


def send_completion(
    transport: Transport, endpoint: tuple[str, int], ids: list[int], gen: int, model: str | None, timeout: float
) -> RequestMetrics:
    """One streamed ``/v1/completions`` of exactly ``ids``, measured as the bytes arrive."""
    body = json.dumps(completions_body(ids, gen, model), separators=(",", ":")).encode()
    with transport.http_stream(*endpoint, "/v1/completions", body, timeout=timeout) as stream:
        return read_completion(stream)


def read_completion(stream: HttpStream) -> RequestMetrics:
    """The metrics of one streamed ``/v1/completions`` answer (or why it has none)."""
    return read_streamed(stream, "/v1/completions", as_generate_chunks)


VLLM_BENCH = VllmBench()
