"""What a host tells us, read-only: the unit's state, its journal, the server's JSON documents.

Each helper is one bounded round trip through the host's Transport; nothing here changes the host. The
server's answers are not trusted: each GET is bounded in time and size (transport/http1.py), a JSON
document in depth (core/jsondoc.py); a bad answer reads as no answer.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from remediate.core.jsondoc import DocumentError, parse_document
from remediate.core.probe import ServiceState, parse_show
from remediate.core.startup import tokens_from_info
from remediate.core.unitfile.report import mask_secrets
from remediate.transport.base import Transport

if TYPE_CHECKING:  # the sweep's modules load with `bench` and `--probe` only, not with `status`
    from remediate.core.bench.latency import RequestMetrics
    from remediate.core.bench.stream import StreamChunk
    from remediate.core.engines.base import Engine
    from remediate.transport.http1 import HttpStream

_STATE_PROPS = "ActiveState,SubState,Result,NRestarts,MainPID,InvocationID"
COMMAND_TIMEOUT_S = 30.0  # each systemctl/journalctl round trip


def journal_since(transport: Transport, unit: str, since_epoch: float | None, lines: int = 400) -> list[str]:
    """Journal lines of the unit since an epoch (or the last ``lines``), secrets masked."""
    since = f" --since @{int(since_epoch)}" if since_epoch else ""
    result = transport.run(
        f"journalctl -u {shlex.quote(unit)} -o cat --no-pager -n {lines}{since} 2>/dev/null", timeout=COMMAND_TIMEOUT_S
    )
    return [mask_secrets(line) for line in result.stdout.splitlines() if line.strip()]


def startup_lines(
    transport: Transport, unit: str, ere: str, lines: int = 400, *, since_epoch: float | None = None
) -> list[str]:
    """The unit's startup lines (``grep -E ere`` over its whole journal, or since ``since_epoch``, the last
    ``lines`` of them), secrets masked: a server up for days has pushed its start far out of any tail."""
    quoted = shlex.quote(unit)
    since = f" --since @{int(since_epoch)}" if since_epoch else ""
    result = transport.run(
        f"journalctl -u {quoted} -o cat --no-pager{since} 2>/dev/null | grep -E {shlex.quote(ere)} | tail -n {lines}",
        timeout=COMMAND_TIMEOUT_S,
    )
    return [mask_secrets(line) for line in result.stdout.splitlines() if line.strip()]


def read_state(transport: Transport, unit: str, *, newest_line: bool = True) -> tuple[ServiceState, str]:
    """One round trip: the unit's state and (for the progress line) its newest journal line."""
    quoted = shlex.quote(unit)
    journal = f"journalctl -u {quoted} -o cat --no-pager -n 1 2>/dev/null" if newest_line else "true"
    result = transport.run(
        f"systemctl show {quoted} -p {_STATE_PROPS} 2>/dev/null; echo @@journal; {journal}", timeout=COMMAND_TIMEOUT_S
    )
    show, _, tail = result.stdout.partition("@@journal\n")
    return ServiceState(unit=unit, properties=parse_show(show)), mask_secrets(tail.strip())


def fetch_server_info(transport: Transport, host: str, port: int) -> tuple[dict[str, Any] | None, str]:
    """The server's info document: ``/server_info`` (sglang ≥ 0.5.6), else ``/get_server_info``."""
    return fetch_json(transport, host, port, "/server_info", "/get_server_info")


def fetch_json(transport: Transport, host: str, port: int, *paths: str) -> tuple[dict[str, Any] | None, str]:
    """The first of ``paths`` that answers 200 with a JSON object, and which one it was (else None, "")."""
    for path in paths:
        response = transport.http_get(host, port, path)
        if response.status == 200:
            try:
                data = parse_document(response.body)
            except DocumentError:
                continue  # bad JSON, or nested past the depth bound: a bad answer, not a crash of the tool
            if isinstance(data, dict):
                return data, path
    return None, ""


def fetch_tokens(transport: Transport, host: str, port: int) -> tuple[int | None, str]:
    """``max_total_num_tokens`` from the server's info endpoint (new name first, then the old one)."""
    info, path = fetch_server_info(transport, host, port)
    if info is None:
        return None, ""
    return tokens_from_info(info), path


def fetch_metrics_info(transport: Transport, host: str, port: int, engine: Engine) -> dict[str, Any] | None:
    """What the running server reports on its Prometheus page (vLLM's ``vllm:cache_config_info``: its pool and
    its utilization, in the info document's keys), None when the engine's metrics say nothing or the page does
    not answer 200; the GET is bounded in time and size like every other (transport/http1.py
    ``MAX_DOCUMENT_BYTES``, 5 s)."""
    if engine.metrics_info is None:
        return None
    response = transport.http_get(host, port, engine.metrics_path)
    if response.status != 200:
        return None
    return dict(engine.metrics_info(response.body.decode("utf-8", "replace"))) or None


def fetch_metrics_tokens(transport: Transport, host: str, port: int, engine: Engine) -> int | None:
    """The pool the running server reports on its Prometheus page (:func:`fetch_metrics_info`)."""
    info = fetch_metrics_info(transport, host, port, engine)
    return tokens_from_info(info) if info is not None else None


def read_streamed(
    stream: HttpStream, path: str, chunks: Callable[[Iterable[StreamChunk]], Iterator[StreamChunk]] = iter
) -> RequestMetrics:
    """The metrics of one streamed answer of ``path`` (sglang's ``/generate``; vLLM's ``/v1/completions``, its
    events turned into the same chunks by ``chunks``), or why it has none: no answer, a status other than 200
    (the server's ``error.message`` or ``message``, bounded), a stream that does not parse."""
    from remediate.core.bench.latency import RequestMetrics, measure_request
    from remediate.core.bench.stream import StreamError, decode_stream

    if stream.status is None:
        return RequestMetrics(error=f"no answer: {stream.error or 'connection refused'}")
    if stream.status != 200:
        text = stream.read().decode("utf-8", "replace").strip()
        try:
            document = json.loads(text)
            error = document.get("error")
            detail = error.get("message", text) if isinstance(error, dict) else document.get("message", text)
        except (ValueError, AttributeError):
            detail = text
        return RequestMetrics(error=f"{path} answered {stream.status}: {str(detail)[:300]}")
    try:
        received = list(chunks(decode_stream(stream.pieces())))
    except StreamError as exc:
        return RequestMetrics(error=str(exc))
    metrics = measure_request(stream.sent_at, received, ended_at=stream.ended_at)
    if stream.error and not metrics.ok:
        return replace(metrics, error=f"{metrics.error}: {stream.error}")
    return metrics
