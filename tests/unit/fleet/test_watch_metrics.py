"""The watcher's /metrics: served on loopback, parsed with prometheus_client's own text parser."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from remediate.errors import ConfigError
from remediate.fleet.watch.metrics import WatchMetrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_served_and_parsed() -> None:
    m = WatchMetrics()
    m.observe_event({"event": "detected", "host": "gpu-1"})
    m.observe_event({"event": "outcome", "host": "gpu-1", "outcome": "remediated"})
    m.observe_round({"gpu-0": "healthy", "gpu-1": "cooling_down", "gpu-2": "healthy"}, breaker_open=False)
    m.poll.observe(0.05)
    server = m.listen(f"127.0.0.1:{_free_port()}")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("remediate_watch_crashes_total", (("host", "gpu-1"),))] == 1
    assert samples[("remediate_watch_fixes_total", (("outcome", "remediated"),))] == 1
    assert samples[("remediate_watch_hosts", (("state", "healthy"),))] == 2
    assert samples[("remediate_watch_breaker_open", ())] == 0
    assert samples[("remediate_watch_poll_seconds_count", ())] == 1


def test_bad_listen_address() -> None:
    with pytest.raises(ConfigError, match="--metrics-listen 'nowhere'"):
        WatchMetrics().listen("nowhere")
