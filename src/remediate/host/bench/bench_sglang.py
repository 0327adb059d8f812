"""The sweep's requests to an sglang server (read-only): its limits, the cache flush, one streamed ``/generate``
of exact ``input_ids``.

python/sglang/srt/entrypoints/http_server.py: ``GET /server_info`` (≥ 0.5.6; ``/get_server_info`` before) with
``max_total_num_tokens`` and ``context_length``, ``GET /model_info``, ``POST /flush_cache`` (400 while requests run),
``POST /generate``. The loop over lengths, the checks and the dead-server report are host/bench/bench.py's.
"""

from __future__ import annotations

import json
from typing import Any

from remediate.core.bench.latency import RequestMetrics
from remediate.core.bench.sweep import generate_body, limits_from_info
from remediate.core.probe import ProbeResult
from remediate.errors import RemediationError
from remediate.host.bench.server import Server
from remediate.host.common.facts import fetch_json, fetch_server_info, read_streamed
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import endpoint_of
from remediate.transport.base import Transport
from remediate.transport.http1 import HttpStream

BUSY_NOTE = "the server is busy: /flush_cache answered 400 (requests are running or queued)"
_CONTEXT_KEYS = ("context_length", "max_context_length", "context_len")


class SglangBench:
    """sglang: ``/server_info`` (+ ``/model_info``) for the limits, ``POST /flush_cache``, a streamed ``/generate``."""

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
        host, port = endpoint
        if info is not None:  # the health wait's: the limits the probe checks against
            limits = limits_from_info(info)
        else:
            info, _ = fetch_server_info(transport, host, port)
            if info is None:
                raise RemediationError(label, f"the server at {host}:{port} does not answer /server_info; is it up?")
            limits = limits_from_info(info, fetch_json(transport, host, port, "/model_info", "/get_model_info")[0])

        def flush() -> tuple[str, str]:
            answer = transport.http_post(host, port, "/flush_cache")
            if answer.status == 400:
                return "busy", BUSY_NOTE
            if answer.status is None:
                return "failed", f"no answer to POST /flush_cache: {answer.error or 'refused'}"
            if answer.status != 200:
                why = f"/flush_cache answered {answer.status} (not flushed; unique prompts miss the cache anyway)"
                return "note", why
            return "ok", ""

        def send(ids: list[int]) -> RequestMetrics:
            body = json.dumps(generate_body(ids, gen), separators=(",", ":")).encode()
            with transport.http_stream(host, port, "/generate", body, timeout=timeout) as stream:
                return read_generate(stream)

        return Server(limits, info, flush, send)

    def running_context(self, transport: Transport, endpoint: tuple[str, int]) -> tuple[int | None, str]:
        info, _ = fetch_server_info(transport, *endpoint)
        for key in _CONTEXT_KEYS:
            value = (info or {}).get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, "the running server's /server_info"
        return None, ""


def read_generate(stream: HttpStream) -> RequestMetrics:
    """The metrics of one streamed ``/generate`` answer (or why it has none)."""
    return read_streamed(stream, "/generate")


SGLANG_BENCH = SglangBench()
