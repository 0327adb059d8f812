"""The API of `plan` (per host, read-only) and `plan --offline` (no host)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from remediate.api.hosts import TransportFactory, for_each_host
from remediate.fleet import jobs
from remediate.models import HostResult
from remediate.transport.base import SSHOptions

__all__ = ["offline_plan", "plan"]


def plan(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    target_tokens: int | None = None,
    chunked_prefill_size: int | None = None,
    margin: float = 0.10,
    observations: str | None = None,
    transport_factory: TransportFactory | None = None,
    forks: int | None = None,
) -> list[HostResult]:
    """`remediate plan`, read-only: per host, the pool and headroom per fraction and the largest that fits
    (``result.plan``). ``observations`` is the calibration log (default: the state directory's)."""
    job = jobs.plan_job(
        unit=unit,
        target_tokens=target_tokens,
        chunked_prefill_size=chunked_prefill_size,
        margin=margin,
        observations=observations,
    )
    return for_each_host(targets, inventory, ssh or SSHOptions(), job, forks=forks, transport_factory=transport_factory)


def offline_plan(
    *,
    gpu_mem_gib: float | None,
    free_after_weights_gib: float | None,
    cell_bytes: float | None,
    page_size: int = 1,
    target_tokens: int | None = None,
    targets: Sequence[str] = (),
) -> dict[str, Any]:
    """`remediate plan --offline`: the plan document from numbers given, no host (``targets`` must be empty)."""
    from remediate.host.plan import budget as host_budget

    return host_budget.offline_plan(
        targets=targets,
        gpu_mem_gib=gpu_mem_gib,
        free_after_weights_gib=free_after_weights_gib,
        cell_bytes=cell_bytes,
        page_size=page_size,
        target_tokens=target_tokens,
    )
