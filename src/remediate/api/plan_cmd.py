"""The API of `plan` (per host, read-only) and `plan --offline` (no host)."""

from __future__ import annotations

from typing import Any

from remediate.api.hosts import TransportFactory, for_each_host
from remediate.fleet import jobs
from remediate.fleet.request import OfflinePlanRequest, PlanRequest
from remediate.models import HostResult, ProgressFn

__all__ = ["OfflinePlanRequest", "PlanRequest", "offline_plan", "plan"]


def plan(
    request: PlanRequest,
    *,
    transport_factory: TransportFactory | None = None,
    progress: ProgressFn | None = None,
) -> list[HostResult]:
    """`remediate plan`, read-only: per host, the pool and headroom per fraction and the largest that fits
    (``result.plan``). ``observations`` is the calibration log (default: the state directory's). A
    request with ``journal`` plans from that saved journal instead, no host (:func:`remediate.api.plan_journal`).
    ``progress``: each host once read."""
    if request.journal is not None:
        from remediate.api.journal import plan_journal

        return plan_journal(request)
    return for_each_host(
        request.targets,
        request.inventory,
        request.ssh,
        jobs.plan_job(request),
        forks=request.forks,
        transport_factory=transport_factory,
        progress=progress,
    )


def offline_plan(request: OfflinePlanRequest) -> dict[str, Any]:
    """`remediate plan --offline`: the plan document from numbers given, no host (``targets`` must be empty)."""
    from remediate.host.plan import budget as host_budget

    return host_budget.offline_plan(
        targets=request.targets,
        gpu_mem_gib=request.gpu_mem_gib,
        free_after_weights_gib=request.free_after_weights_gib,
        cell_bytes=request.cell_bytes,
        page_size=request.page_size,
        target_tokens=request.target_tokens,
    )
