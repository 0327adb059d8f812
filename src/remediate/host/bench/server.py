"""The bench's side of the engine seam: what the sweep and ``oom --probe`` ask of a server, per engine.

A :class:`BenchEngine` says where the unit's server listens, opens it for the sweep (its limits, the info the
result shows, the cache flush, one streamed request of exact token ids) and how long a sequence the running
server takes. Each engine's is a module named for it (``bench_sglang.py``, ``bench_vllm.py``); bench.py holds
the registry, keyed by the engine's name (core/engines/).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from remediate.core.bench.latency import RequestMetrics
from remediate.core.bench.sweep import ServerLimits
from remediate.core.probe import ProbeResult
from remediate.host.common.options import RunOptions
from remediate.transport.base import Transport


@dataclass(frozen=True)
class Server:
    """One engine's server as the sweep uses it: its limits, its info document (unmasked), the cache flush
    before each request — ("ok" | "busy" | "failed" | "note", why) — and one streamed request of exact ids."""

    limits: ServerLimits
    info: dict[str, Any]
    flush: Callable[[], tuple[str, str]]
    send: Callable[[list[int]], RequestMetrics]


class BenchEngine(Protocol):
    """What the sweep and ``--probe`` need of one engine's server."""

    def endpoint(self, found: ProbeResult, options: RunOptions) -> tuple[str, int]:
        """Where the unit's server listens, as seen from the host."""
        ...

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
        """The server at ``endpoint`` opened for requests of ``gen`` generated tokens (``info``: an info document
        already read, the health wait's, where the engine has one). RemediationError when it does not answer."""
        ...

    def running_context(self, transport: Transport, endpoint: tuple[str, int]) -> tuple[int | None, str]:
        """The running server's context length and where it was read ((None, "") where it says none)."""
        ...
