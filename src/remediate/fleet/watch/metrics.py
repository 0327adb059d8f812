"""The watcher's Prometheus metrics (``--metrics-listen HOST:PORT``, prometheus-client): crashes seen,
fixes by outcome, hosts by state, the breaker, poll latency. One registry per watcher (not the global one)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from remediate.errors import ConfigError

HOST_STATES = ("healthy", "crashed", "remediating", "cooling_down", "needs_human", "unreachable", "unknown")


class WatchMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.crashes = Counter("remediate_watch_crashes", "Crashes seen", ["host"], registry=self.registry)
        self.fixes = Counter("remediate_watch_fixes", "Automatic fixes by outcome", ["outcome"], registry=self.registry)
        self.hosts = Gauge("remediate_watch_hosts", "Watched hosts by state", ["state"], registry=self.registry)
        self.breaker = Gauge("remediate_watch_breaker_open", "1 while the breaker is open", registry=self.registry)
        self.poll = Histogram("remediate_watch_poll_seconds", "One host's poll round trip", registry=self.registry)

    def observe_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "detected":
            self.crashes.labels(host=str(event.get("host"))).inc()
        elif kind == "outcome":
            self.fixes.labels(outcome=str(event.get("outcome"))).inc()
        elif kind == "breaker":
            self.breaker.set(1)

    def observe_round(self, states: dict[str, str], breaker_open: bool) -> None:
        for state in HOST_STATES:
            self.hosts.labels(state=state).set(sum(1 for s in states.values() if s == state))
        self.breaker.set(1 if breaker_open else 0)

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def listen(self, address: str) -> Any:
        """Serve /metrics on ``address`` (a daemon thread); the server, for a caller that stops it."""
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"--metrics-listen {address!r}: HOST:PORT")
        try:
            server, _ = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"--metrics-listen {address}: {exc.strerror}") from None
        return server
