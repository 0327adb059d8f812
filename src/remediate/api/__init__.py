"""The Python API. The CLI is a thin layer over these functions; scripts can call them directly.

>>> from remediate import api
>>> rollout = api.remediate_oom(["gpu-*"], inventory="inventory.yaml", canary=1, batch="25%")
>>> [(r.host, r.outcome, r.max_total_num_tokens) for r in rollout.results]

Every function returns one :class:`~remediate.models.HostResult` per selected host (inventory
order) inside a :class:`RolloutResult`; a failing host never raises, it is a result.

The names are imported from their modules on first use (PEP 562): `remediate oom` then loads the change
path only, not `bench`'s or `plan`'s modules, and its first connection starts sooner (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remediate.api.change import remediate_oom, remediate_oom_request, rollback
    from remediate.api.hosts import RolloutResult, TransportFactory, exit_code, for_each_host, run_on_hosts
    from remediate.api.local import EditResult, edit_unit_file
    from remediate.api.read import backups, bench, diagnose, plan, status

_HOMES = {
    "remediate_oom": "change",
    "remediate_oom_request": "change",
    "rollback": "change",
    "RolloutResult": "hosts",
    "TransportFactory": "hosts",
    "exit_code": "hosts",
    "for_each_host": "hosts",
    "run_on_hosts": "hosts",
    "EditResult": "local",
    "edit_unit_file": "local",
    "backups": "read",
    "bench": "read",
    "diagnose": "read",
    "plan": "read",
    "status": "read",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
