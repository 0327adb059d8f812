"""The Python API: a typed front door. The CLI is a thin layer over these functions; scripts call them directly.

>>> from remediate import api
>>> strategy = api.StrategyArgs(canary=1, batch="25%")
>>> request = api.OomRequest(targets=("gpu-*",), inventory="inventory.yaml", strategy=strategy)
>>> rollout = api.remediate_oom(request)
>>> [(r.host, r.outcome, r.max_total_num_tokens) for r in rollout.results]

The shape, the same for every function that reaches hosts: ``fn(request, *, transport_factory=None,
progress=None)`` (rollouts take ``confirm=`` too), one frozen request per command, checked when it is built
(fleet/request.py): :class:`StatusRequest`, :class:`DiagnoseRequest`, :class:`BackupsRequest`,
:class:`PlanRequest`, :class:`RollbackRequest`, :class:`OomRequest`, ``BenchRequest`` (:func:`bench_request`).

- Every request starts with ``targets`` as on the command line (hosts, or names, groups, globs and ``all`` of
  the ``inventory``), ``inventory``, ``ssh`` (an :class:`SSHOptions`) and ``unit``; then the command's own
  options as typed fields (None: the inventory's value, else the built-in default).
- Rollouts (``remediate_oom``, ``rollback``) take ``strategy=`` :class:`StrategyArgs` (``canary``, ``batch``,
  ``forks``, ``max_failures``, ``pause_after_canary``: the inventory's ``rollout:`` fills what is not given);
  :class:`OomRequest` takes its desired state as :class:`DesiredArgs` (:func:`desired_args` checks strings).
- ``transport_factory=`` (default: SSH) lets scripts and tests bring their own transport; :func:`local_host`
  gives this machine's target and its local transport (`--local`, the Ansible modules). ``progress=`` gets
  ``(host, phase, detail)`` (the read-only commands: each host once read); ``bench``'s is a ``SweepProgress``
  (each host, request and point of the sweep).
- Returns values, never text: ``status``, ``diagnose``, ``backups``, ``plan`` one
  :class:`~remediate.models.HostResult` per selected host (inventory order); ``remediate_oom`` and
  ``rollback`` a :class:`RolloutResult` (its ``results``, the batches, the retry file); ``bench`` one
  :class:`HostBench` per host; ``offline_plan`` (an :class:`OfflinePlanRequest`) the plan document;
  ``diagnose_journal`` and ``plan_journal`` (a request with ``journal``: a saved journal, no host) one result;
  ``edit_unit_file`` an :class:`EditResult`.
  A failing host never raises, it is a result; bad input raises ConfigError before any host is contacted.
  :func:`exit_code` is the CLI's exit code for a list of results.

The names are imported from their modules on first use (PEP 562): `remediate oom` then loads the change
path only, not `bench`'s or `plan`'s modules (`status` not `bench`'s), and its first connection starts
sooner (docs/internals/PERFORMANCE.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remediate.api.bench_cmd import (
        DEFAULT_CONTEXTS,
        DEFAULT_GEN,
        BenchOptions,
        BenchRequest,
        HostBench,
        bench,
        bench_request,
        finish_bench,
    )
    from remediate.api.diagnose_cmd import DiagnoseRequest, diagnose
    from remediate.api.hosts import (
        RolloutResult,
        SSHOptions,
        TransportFactory,
        exit_code,
        for_each_host,
        local_host,
        run_on_hosts,
    )
    from remediate.api.journal import check_journal_flags, diagnose_journal, plan_journal
    from remediate.api.local import EditResult, edit_unit_file
    from remediate.api.oom import DesiredArgs, OomRequest, StrategyArgs, desired_args, remediate_oom
    from remediate.api.plan_cmd import OfflinePlanRequest, PlanRequest, offline_plan, plan
    from remediate.api.rollback_cmd import BackupsRequest, RollbackRequest, backups, rollback
    from remediate.api.status_cmd import StatusRequest, status

_HOMES = {
    "DEFAULT_CONTEXTS": "bench_cmd",
    "DEFAULT_GEN": "bench_cmd",
    "BenchOptions": "bench_cmd",
    "BenchRequest": "bench_cmd",
    "HostBench": "bench_cmd",
    "bench": "bench_cmd",
    "bench_request": "bench_cmd",
    "finish_bench": "bench_cmd",
    "OomRequest": "oom",
    "DesiredArgs": "oom",
    "StrategyArgs": "oom",
    "DiagnoseRequest": "diagnose_cmd",
    "PlanRequest": "plan_cmd",
    "OfflinePlanRequest": "plan_cmd",
    "RollbackRequest": "rollback_cmd",
    "BackupsRequest": "rollback_cmd",
    "StatusRequest": "status_cmd",
    "desired_args": "oom",
    "remediate_oom": "oom",
    "rollback": "rollback_cmd",
    "RolloutResult": "hosts",
    "TransportFactory": "hosts",
    "SSHOptions": "hosts",
    "exit_code": "hosts",
    "for_each_host": "hosts",
    "local_host": "hosts",
    "run_on_hosts": "hosts",
    "EditResult": "local",
    "edit_unit_file": "local",
    "offline_plan": "plan_cmd",
    "diagnose_journal": "journal",
    "plan_journal": "journal",
    "check_journal_flags": "journal",
    "plan": "plan_cmd",
    "backups": "rollback_cmd",
    "diagnose": "diagnose_cmd",
    "status": "status_cmd",
}

__all__ = [
    "DEFAULT_CONTEXTS",
    "DEFAULT_GEN",
    "BackupsRequest",
    "BenchOptions",
    "BenchRequest",
    "DesiredArgs",
    "DiagnoseRequest",
    "EditResult",
    "HostBench",
    "OfflinePlanRequest",
    "OomRequest",
    "PlanRequest",
    "RollbackRequest",
    "RolloutResult",
    "SSHOptions",
    "StatusRequest",
    "StrategyArgs",
    "TransportFactory",
    "backups",
    "bench",
    "bench_request",
    "check_journal_flags",
    "desired_args",
    "diagnose",
    "diagnose_journal",
    "edit_unit_file",
    "exit_code",
    "finish_bench",
    "for_each_host",
    "local_host",
    "offline_plan",
    "plan",
    "plan_journal",
    "remediate_oom",
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
