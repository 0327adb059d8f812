"""The API of `diagnose`, read-only, no lock; the host module loads on the first host's call."""

from __future__ import annotations

from remediate.api.hosts import TransportFactory, for_each_host
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import DiagnoseRequest
from remediate.fleet.settings import unit_options_for
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Transport

__all__ = ["DiagnoseRequest", "diagnose"]


def diagnose(
    request: DiagnoseRequest,
    *,
    transport_factory: TransportFactory | None = None,
    progress: ProgressFn | None = None,
) -> list[HostResult]:
    """Read-only, no lock: each host's latest failure, why, and the `remediate oom` that fixes it. ``lines``:
    the journal lines to read (None: host/diagnose.py's DEFAULT_LINES, 2000). A request with ``journal`` reads
    that saved journal instead, no host (:func:`remediate.api.diagnose_journal`). ``progress``: each host once read."""
    from remediate.host.diagnose.diagnose import DEFAULT_LINES, diagnose_host, parse_since

    if request.journal is not None:
        from remediate.api.journal import diagnose_journal

        return diagnose_journal(request)
    count = DEFAULT_LINES if request.lines is None else request.lines
    restarts, since_time = parse_since(request.since, count)

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.units import each_unit

        options = unit_options_for(entry, request.unit, smi_timeout=request.smi_timeout)
        return each_unit(
            transport,
            options,
            lambda t, o: diagnose_host(t, o, lines=count, since=since_time, since_restarts=restarts, label=entry.name),
            label=entry.name,
        )

    return for_each_host(
        request.targets,
        request.inventory,
        request.ssh,
        one,
        forks=request.forks,
        transport_factory=transport_factory,
        progress=progress,
    )
