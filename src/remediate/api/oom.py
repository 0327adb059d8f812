"""The API of `oom`: the OOM fix as a rollout over the selected hosts, and its request's desired state."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from remediate.api.hosts import (
    RolloutResult,
    TransportFactory,
    check_results_kept,
    connect_ahead,
    given_hosts,
)
from remediate.fleet import jobs
from remediate.fleet.request import DesiredArgs, OomRequest, StrategyArgs
from remediate.fleet.settings import (
    build_strategy,
    parse_desired_args,
    resolve_hosts,
    run_options_for,
)
from remediate.models import HostResult, ProgressFn

__all__ = ["DesiredArgs", "OomRequest", "StrategyArgs", "desired_args", "remediate_oom"]


def desired_args(
    *,
    mem_fraction_static: float | str | Decimal | None = None,
    mem_fraction_step: float | str | Decimal | None = None,
    chunked_prefill_size: int | str | None = None,
    alloc_conf: str | None = None,
) -> DesiredArgs:
    """The desired state asked for, checked and typed, as :class:`OomRequest`'s ``desired`` takes it
    (None = not given: the inventory's value, else the built-in recipe). A bad value is a ConfigError."""
    return parse_desired_args(
        mem_fraction_static=mem_fraction_static,
        mem_fraction_step=mem_fraction_step,
        chunked_prefill_size=chunked_prefill_size,
        alloc_conf=alloc_conf,
    )


def remediate_oom(
    request: OomRequest,
    *,
    transport_factory: TransportFactory | None = None,
    progress: ProgressFn | None = None,
    confirm: Callable[[str], bool] | None = None,
    stop_when: Callable[[HostResult], str | None] | None = None,
    retry_dir: str | None = None,
) -> RolloutResult:
    """`remediate oom`: remediate the OOM on every host the request selects, as a rollout; see
    `remediate oom --help` for the semantics. The request carries the targets, ``inventory``, ``ssh``,
    ``strategy`` (:class:`StrategyArgs`), the desired state (:func:`desired_args`) and the run's options
    (``auto``, ``allow_raise``, ``dry_run``…).

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
