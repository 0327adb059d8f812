"""Running a per-host function over the selected hosts: connections, the rollout, results and exit codes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remediate.errors import EXIT_BAD_INPUT, EXIT_BUG, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, ConfigError
from remediate.fleet.inventory import HostEntry, Inventory
from remediate.fleet.retry import write_retry_file
from remediate.fleet.rollout import Rollout, Strategy, plan_batches
from remediate.fleet.settings import (
    resolve_hosts,
    ssh_for,
)
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import SSHOptions as SSHOptions  # the api's too (api.SSHOptions)
from remediate.transport.base import Transport
from remediate.transport.preconnect import Preconnect, resolve

TransportFactory = Callable[[HostEntry, SSHOptions], Transport]
"""Opens a host's one connection: ``(inventory entry, resolved SSH options) -> Transport``. Every remote
function takes one as ``transport_factory`` (default: SSH), so scripts and tests can bring their own."""


@dataclass
class RolloutResult:
    results: list[HostResult]
    batches: list[list[str]] = field(default_factory=list)
    halted: str | None = None
    interrupted: bool = False
    retry_file: str | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def extra(self) -> dict[str, Any]:
        return {
            "rollout": {
                "batches": self.batches,
                "halted": self.halted,
                "interrupted": self.interrupted,
                "retry_file": self.retry_file,
            }
        }


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


def _ssh_config_files(options: SSHOptions) -> list[Path]:
    """The files Fabric reads: --ssh-config alone, else the user's and the system's."""
    if options.ssh_config:
        return [Path(options.ssh_config)]
    return [Path("~/.ssh/config"), Path("/etc/ssh/ssh_config")]


def run_on_hosts(
    hosts: list[HostEntry],
    work: Callable[[HostEntry], HostResult],
    strategy: Strategy,
    *,
    confirm: Callable[[str], bool] | None = None,
    on_event: Callable[[str], None] | None = None,
    stop_when: Callable[[HostResult], str | None] | None = None,
) -> tuple[list[HostResult], Rollout[HostEntry]]:
    rollout = Rollout(
        hosts=hosts,
        name_of=lambda h: h.name,
        work=work,
        strategy=strategy,
        confirm=confirm,
        on_event=on_event,
        stop_when=stop_when,
    )
    return rollout.run(), rollout


class ConnectAhead:
    """The first batch's connections, started before the per-host job exists: their handshakes overlap the
    import of the transaction's modules (the job's). A factory: each host's work takes its transport once;
    hosts beyond the first batch connect when their turn comes. :meth:`close` closes what was never taken."""

    def __init__(self, factory: TransportFactory | None) -> None:
        self._factory = factory or _default_transport
        self._ssh = factory is None
        self._ready: dict[str, Transport] = {}

    def start(self, hosts: Sequence[HostEntry], strategy: Strategy, ssh: SSHOptions) -> ConnectAhead:
        """Over SSH, first the TCP connections (transport/preconnect.py), then the transports (paramiko is
        imported meanwhile), each handed its socket and told to connect in the background."""
        sizes = plan_batches(len(hosts), strategy)
        first: list[tuple[HostEntry, SSHOptions, Preconnect | None]] = []
        for entry in hosts[: min(sizes[0], max(strategy.forks, 1))] if sizes else []:
            try:
                options = ssh_for(entry, ssh)
            except ConfigError:
                continue  # the host's work reports it, as it would without the head start
            where = resolve(entry.address, options.port, _ssh_config_files(options)) if self._ssh else None
            first.append((entry, options, Preconnect(where, options.connect_timeout) if where else None))
        for entry, options, pre in first:
            transport = self._factory(entry, options)
            if pre is not None:
                transport.preconnected(pre)  # type: ignore[attr-defined]  # the SSH transport's
            opener = getattr(transport, "open_ahead", None)  # the SSH transport's; others connect in open()
            if opener is not None:
                opener()
            self._ready[entry.name] = transport
        return self

    def __call__(self, entry: HostEntry, options: SSHOptions) -> Transport:
        return self._ready.pop(entry.name, None) or self._factory(entry, options)

    def close(self) -> None:
        while self._ready:
            self._ready.popitem()[1].close()


def _safely(entry: HostEntry, fn: Callable[[], HostResult]) -> HostResult:
    """Input errors found per host (bad inventory values) become that host's result, not a crash."""
    try:
        return fn()
    except ConfigError as exc:
        return HostResult(host=entry.name, outcome="failed", error=str(exc), exit_code=exc.exit_code)


def _connected(
    job: Callable[[Transport, HostEntry], HostResult],
    ssh: SSHOptions,
    transport_factory: TransportFactory | None,
) -> Callable[[HostEntry], HostResult]:
    """Wrap a per-host job: open the host's one connection, run the job, always close it."""
    factory = transport_factory or _default_transport

    def work(entry: HostEntry) -> HostResult:
        def go() -> HostResult:
            transport = factory(entry, ssh_for(entry, ssh))
            try:
                return job(transport, entry)
            finally:
                transport.close()

        return _safely(entry, go)

    return work


def _roll_out(
    hosts: list[HostEntry],
    inventory: Inventory | None,
    strategy: Strategy,
    ssh: SSHOptions,
    job: Callable[[Transport, HostEntry], HostResult],
    *,
    dry_run: bool,
    progress: ProgressFn | None,
    confirm: Callable[[str], bool] | None,
    transport_factory: TransportFactory | None,
    stop_when: Callable[[HostResult], str | None] | None = None,
    retry_dir: str | None = None,
    retry_file: str | None = None,
) -> RolloutResult:
    """Run a mutating per-host job as a rollout, one connection per host, and write the retry file
    (inventory rollouts only: into ``retry_dir``, default the state directory's ``retry/``, or ``retry_file``)."""
    work = _connected(job, ssh, transport_factory)
    events = (lambda text: progress("rollout", "", text)) if progress and len(hosts) > 1 else None
    results, rollout = run_on_hosts(hosts, work, strategy, confirm=confirm, on_event=events, stop_when=stop_when)
    retry = None if dry_run else write_retry_file(inventory, results, retry_dir, path=retry_file)
    return RolloutResult(results, rollout.batches, rollout.halted, rollout.interrupted, retry)


def for_each_host(
    targets: Sequence[str],
    inventory_path: str | None,
    ssh: SSHOptions,
    fn: Callable[[Transport, HostEntry], HostResult],
    *,
    forks: int = 10,
    transport_factory: TransportFactory | None = None,
) -> list[HostResult]:
    """Run a read-only per-host function over the selected hosts, ``forks`` at a time."""
    _, hosts = resolve_hosts(targets, inventory_path)
    work = _connected(fn, ssh, transport_factory)
    results, _ = run_on_hosts(hosts, work, Strategy(canary=0, forks=forks, max_failures="100%"))
    return results
