"""The API of `status`, read-only; each host's host module loads on its first call, while the first hosts' handshakes
are under way (fleet/jobs.py ``for_each_host``)."""

from __future__ import annotations

from collections.abc import Sequence

from remediate.api.hosts import TransportFactory, for_each_host
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest
from remediate.fleet.settings import run_options_for
from remediate.models import HostResult
from remediate.transport.base import SSHOptions, Transport

__all__ = ["status"]


def status(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    forks: int | None = None,
    transport_factory: TransportFactory | None = None,
) -> list[HostResult]:
    """Per host: unit, state, current fraction/chunk/alloc conf, tokens, and whether it is remediated.
    ``forks``: hosts at once (None: the inventory's ``rollout: forks``, else 10)."""

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.status.status import status_host
        from remediate.host.units import each_unit

        options = run_options_for(entry, OomRequest(unit=unit))
        return each_unit(transport, options, lambda t, o: status_host(t, o, label=entry.name), label=entry.name)

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, forks=forks, transport_factory=transport_factory)
