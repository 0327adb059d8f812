"""The API of the commands that change hosts: `oom` and `rollback`, as rollouts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from remediate.api.hosts import RolloutResult, TransportFactory, connect_ahead, transports
from remediate.controller.state import check_state_dir
from remediate.core.bounds import check_options
from remediate.errors import ConfigError
from remediate.fleet import jobs
from remediate.fleet.inventory import HostEntry, Inventory, load_inventory
from remediate.fleet.request import OomRequest
from remediate.fleet.retry import check_retry_target
from remediate.fleet.settings import (
    build_strategy,
    parse_desired_args,
    resolve_hosts,
    run_options_for,
)
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import SSHOptions

__all__ = ["OomRequest", "desired_args", "remediate_oom", "rollback"]


def given_hosts(hosts: Sequence[HostEntry], inventory: str | None) -> tuple[Inventory | None, list[HostEntry]] | None:
    """Hosts a caller resolved already, with the inventory for the run's defaults and retry file; None: none
    given (the targets are resolved). A name is never resolved again: a host named `all`, like a group or a
    glob stays that one host, and the address is the one given, whatever the inventory says now."""
    if not hosts:
        return None
    return (load_inventory(inventory) if inventory else None), list(hosts)


def check_results_kept(inventory: Inventory | None, retry_dir: str | None, retry_file: str | None) -> None:
    """Before the first host is touched: where the results go (the state directory and its transaction
    record, the retry file) can be written. ConfigError naming the path (exit 2) otherwise: a run that could
    not keep its results must not change hosts first."""
    check_state_dir()
    check_retry_target(inventory, retry_dir, path=retry_file)


def desired_args(
    *,
    mem_fraction_static: float | str | Decimal | None = None,
    mem_fraction_step: float | str | Decimal | None = None,
    chunked_prefill_size: int | str | None = None,
    alloc_conf: str | None = None,
) -> dict[str, Any]:
    """The desired state asked for, checked and typed, as :class:`OomRequest`'s ``cli_desired`` takes it
    (None = not given: the inventory's value, else the built-in recipe). A bad value is a ConfigError."""
    raw = {
        "mem_fraction_static": mem_fraction_static,
        "mem_fraction_step": mem_fraction_step,
        "chunked_prefill_size": chunked_prefill_size,
        "alloc_conf": alloc_conf,
    }
    return parse_desired_args(raw)


def remediate_oom(
    request: OomRequest,
    *,
    progress: ProgressFn | None = None,
    confirm: Callable[[str], bool] | None = None,
    stop_when: Callable[[HostResult], str | None] | None = None,
    retry_dir: str | None = None,
    transport_factory: TransportFactory | None = None,
) -> RolloutResult:
    """`remediate oom`: remediate the OOM on every host the request selects, as a rollout; see
    `remediate oom --help` for the semantics. The request carries the targets, ``inventory``, ``ssh``,
    ``strategy``, the desired state (:func:`desired_args`) and the run's options (``auto``, ``allow_raise``,
    ``dry_run``…).

    ``stop_when(result) -> reason | None`` is a custom policy: return a reason to halt the
    rollout after any host (e.g. too few tokens); in-flight hosts finish, the rest are not attempted.
    """
    inventory, hosts = given_hosts(request.hosts, request.inventory) or resolve_hosts(
        request.targets, request.inventory
    )
    strategy = build_strategy(request.strategy, inventory)
    per_host = {h.name: run_options_for(h, request) for h in hosts}  # validate all input before touching any host
    if not request.dry_run:
        check_results_kept(inventory, retry_dir, request.retry_file)
    ahead = connect_ahead(transport_factory).start(hosts, strategy, request.ssh)
    try:
        return jobs.roll_out(
            jobs.Fleet(hosts, inventory, strategy, request.ssh, ahead),
            # The job imports the transaction's modules: the first batch's handshakes are under way meanwhile.
            jobs.oom_job(request, per_host, progress),  # --auto planning; healthy ends are recorded
            hooks=jobs.Hooks(progress, confirm, stop_when),
            retry=None if request.dry_run else jobs.RetryTarget(retry_dir, request.retry_file),
        )
    finally:
        ahead.close()


def rollback(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    to: str = "latest",
    timeout: float = 900.0,
    dry_run: bool = False,
    strategy: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    confirm: Callable[[str], bool] | None = None,
    transport_factory: TransportFactory | None = None,
    retry_dir: str | None = None,
    retry_file: str | None = None,
    lock_timeout: int | None = None,
    all_instances: bool = False,
    hosts: Sequence[HostEntry] = (),
) -> RolloutResult:
    """Restore each host's latest backup (or ``to``); a rollback over a group is a rollout too. ``hosts``: the
    hosts themselves, already resolved (the watcher's, as polled): ``targets`` are not resolved again."""
    check_options(wait_timeout=timeout, lock_timeout=lock_timeout)  # before anything is read, as the CLI does
    inventory_obj, hosts = given_hosts(hosts, inventory) or resolve_hosts(targets, inventory)
    if to != "latest" and len(hosts) > 1:
        raise ConfigError("--to PATH names one file: use it with one host")
    plan = build_strategy(strategy or {}, inventory_obj)
    options = {
        h.name: replace(
            run_options_for(
                h, OomRequest(unit=unit, timeout=timeout, lock_timeout=lock_timeout, all_instances=all_instances)
            ),
            dry_run=dry_run,
        )
        for h in hosts
    }
    if not dry_run:
        check_results_kept(inventory_obj, retry_dir, retry_file)
    return jobs.roll_out(
        jobs.Fleet(hosts, inventory_obj, plan, ssh or SSHOptions(), transports(transport_factory)),
        jobs.rollback_job(options, to, progress),  # a healthy end is recorded
        hooks=jobs.Hooks(progress, confirm),
        retry=None if dry_run else jobs.RetryTarget(retry_dir, retry_file),
    )
