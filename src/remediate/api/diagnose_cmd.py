"""The API of `diagnose`, read-only, no lock; the host module loads on the first host's call."""

from __future__ import annotations

from collections.abc import Sequence

from remediate.api.hosts import TransportFactory, for_each_host
from remediate.core.bounds import check_options
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest
from remediate.fleet.settings import run_options_for
from remediate.models import HostResult
from remediate.transport.base import SSHOptions, Transport

__all__ = ["diagnose"]


def diagnose(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    lines: int | None = None,
    since: str | None = None,
    transport_factory: TransportFactory | None = None,
    smi_timeout: int | None = None,
    forks: int | None = None,
) -> list[HostResult]:
    """Read-only, no lock: each host's latest failure, why, and the `remediate oom` that fixes it. ``lines``:
    the journal lines to read (None: host/diagnose.py's DEFAULT_LINES, 2000)."""
    from remediate.host.diagnose.diagnose import DEFAULT_LINES, diagnose_host, parse_since

    check_options(lines=lines, smi_timeout=smi_timeout)  # bad input fails before any host is contacted
    count = DEFAULT_LINES if lines is None else lines
    restarts, since_time = parse_since(since, count)

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.units import each_unit

        options = run_options_for(entry, OomRequest(unit=unit, smi_timeout=smi_timeout))
        return each_unit(
            transport,
            options,
            lambda t, o: diagnose_host(t, o, lines=count, since=since_time, since_restarts=restarts, label=entry.name),
            label=entry.name,
        )

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, forks=forks, transport_factory=transport_factory)
