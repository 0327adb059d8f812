"""The API's side of running a per-host function over the selected hosts: the default SSH transport (the one
place it is chosen), the local one (`--local`: :func:`local_host`), results and exit codes. The plumbing
itself (connections, the rollout, the retry file) is the fleet's: fleet/jobs.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from remediate.controller.state import check_state_dir
from remediate.core.bounds import check_options
from remediate.errors import EXIT_BAD_INPUT, EXIT_BUG, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE
from remediate.fleet import jobs
from remediate.fleet.inventory import HostEntry, Inventory, load_inventory
from remediate.fleet.jobs import ConnectAhead, RolloutResult, TransportFactory, run_on_hosts
from remediate.fleet.retry import check_retry_target
from remediate.fleet.settings import LocalTarget
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import SSHOptions, Transport

__all__ = [
    "RolloutResult",
    "check_results_kept",
    "given_hosts",
    "SSHOptions",
    "TransportFactory",
    "connect_ahead",
    "exit_code",
    "for_each_host",
    "local_host",
    "run_on_hosts",
    "transports",
]


def exit_code(results: Sequence[HostResult]) -> int:
    """0 all ok; 70 when any host hit a bug (internal error); 3 when every failure is unreachable/auth; 2 when
    every failure is bad input; else 1."""
    failed = [r for r in results if not r.ok]
    if not failed:
        return EXIT_OK
    codes = {r.exit_code for r in failed}
    if EXIT_BUG in codes:
        return EXIT_BUG
    if codes == {EXIT_UNREACHABLE}:
        return EXIT_UNREACHABLE
    if codes == {EXIT_BAD_INPUT}:
        return EXIT_BAD_INPUT
    return EXIT_FAILED


def _default_transport(entry: HostEntry, options: SSHOptions) -> Transport:
    # Imported on first use: ConnectAhead starts the first TCP connections before paramiko's import (~0.3 s).
    from remediate.transport.ssh import SSHTransport

    # host, user and port go separately: Fabric's "user@host:port" shorthand cannot carry an IPv6 port
    return SSHTransport(entry.address, options, label=entry.name)


def _local_transport(entry: HostEntry, options: SSHOptions) -> Transport:
    from remediate.transport.local import LocalTransport  # neither paramiko nor fabric is imported for it

    return LocalTransport(entry.name)


def local_host() -> tuple[tuple[str, ...], TransportFactory]:
    """`--local`: this machine as the one target (named by its hostname; no inventory is read) and the factory
    of its transport (transport/local.py: subprocesses and loopback sockets, run as root). Pass both to any
    function here: ``targets, factory = local_host(); status(targets, transport_factory=factory)``."""
    from remediate.transport.local import hostname

    return (LocalTarget(hostname()),), _local_transport


def transports(factory: TransportFactory | None) -> TransportFactory:
    """The caller's transport factory, else SSH."""
    return factory or _default_transport


def connect_ahead(factory: TransportFactory | None) -> ConnectAhead:
    """The first batch's connections ahead of the job: over SSH (TCP first) unless a factory is given."""
    return ConnectAhead(transports(factory), preconnect=factory is None)


def for_each_host(
    targets: Sequence[str],
    inventory_path: str | None,
    ssh: SSHOptions,
    fn: Callable[[Transport, HostEntry], HostResult],
    *,
    forks: int | None = None,
    transport_factory: TransportFactory | None = None,
    progress: ProgressFn | None = None,
) -> list[HostResult]:
    """Run a read-only per-host function over the selected hosts, ``forks`` at a time (None: the inventory's
    ``rollout: forks``, else 10); the first of them connect ahead, over SSH (TCP first) unless a factory is
    given, as :func:`connect_ahead` does for `oom`. ``progress(host, "read", outcome)`` as each host is read."""
    check_options(forks=forks)  # before any host is contacted, as the command line checks it

    def reported(transport: Transport, entry: HostEntry) -> HostResult:
        result = fn(transport, entry)
        if progress is not None:
            progress(entry.name, "read", result.outcome)
        return result

    return jobs.for_each_host(
        targets,
        inventory_path,
        ssh,
        reported,
        forks=forks,
        transport_factory=transports(transport_factory),
        preconnect=transport_factory is None,
    )


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
