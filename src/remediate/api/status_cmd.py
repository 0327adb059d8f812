"""The API of `status`, read-only; each host's host module loads on its first call, while the first hosts' handshakes
are under way (fleet/jobs.py ``for_each_host``)."""

from __future__ import annotations

from remediate.api.hosts import TransportFactory, for_each_host
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import StatusRequest
from remediate.fleet.settings import unit_options_for
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Transport

__all__ = ["StatusRequest", "status"]


def status(
    request: StatusRequest,
    *,
    transport_factory: TransportFactory | None = None,
    progress: ProgressFn | None = None,
) -> list[HostResult]:
    """Per host: unit, state, current fraction/chunk/alloc conf, tokens, and whether it is remediated.
    ``progress``: each host once read."""

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.status.status import status_host
        from remediate.host.units import each_unit

        options = unit_options_for(entry, request.unit)
        return each_unit(transport, options, lambda t, o: status_host(t, o, label=entry.name), label=entry.name)

    return for_each_host(
        request.targets,
        request.inventory,
        request.ssh,
        one,
        forks=request.forks,
        transport_factory=transport_factory,
        progress=progress,
    )
