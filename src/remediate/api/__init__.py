"""The Python API. The CLI is a thin layer over these functions; scripts can call them directly.

>>> from remediate import api
>>> rollout = api.remediate_oom(["gpu-*"], inventory="inventory.yaml", canary=1, batch="25%")
>>> [(r.host, r.outcome, r.max_total_num_tokens) for r in rollout.results]

Every function returns one :class:`~remediate.models.HostResult` per selected host (inventory
order) inside a :class:`RolloutResult`; a failing host never raises, it is a result.
"""

from __future__ import annotations

from remediate.api.change import remediate_oom, remediate_oom_request, rollback
from remediate.api.hosts import RolloutResult, TransportFactory, exit_code, for_each_host, run_on_hosts
from remediate.api.local import EditResult, edit_unit_file
from remediate.api.read import backups, bench, diagnose, plan, status

__all__ = [
    "EditResult",
    "RolloutResult",
    "TransportFactory",
    "backups",
    "bench",
    "diagnose",
    "edit_unit_file",
    "exit_code",
    "for_each_host",
    "plan",
    "remediate_oom",
    "remediate_oom_request",
    "rollback",
    "run_on_hosts",
    "status",
]
