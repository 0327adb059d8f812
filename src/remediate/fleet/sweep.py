"""``remediate bench`` over the selected hosts: one after another, never two at once (a benchmark that
shares the client, or a host's neighbours, measures the sharing), one connection per host."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from remediate.core.sweep import DEFAULT_CONTEXTS, HostBench, parse_contexts
from remediate.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, ConfigError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.settings import resolve_hosts, ssh_for
from remediate.host.bench import BenchOptions, PointFn, RequestFn, bench_host
from remediate.transport.base import SSHOptions, Transport
from remediate.transport.ssh import SSHTransport

TransportFactory = Callable[[HostEntry, SSHOptions], Transport]

HostStartFn = Callable[[HostEntry, int, int], None]  # (host, its index, how many hosts are selected)


def options_for(entry: HostEntry, options: BenchOptions) -> BenchOptions:
    """Command line > inventory host vars > defaults, for what ``bench`` reads from the inventory."""
    s = entry.settings
    return replace(options, unit=options.unit or s.get("unit"), server_port=options.server_port or s.get("server_port"))


def bench_hosts(
    hosts: Sequence[HostEntry],
    options: BenchOptions,
    ssh_of: Callable[[HostEntry], SSHOptions],
    factory: Callable[[HostEntry, SSHOptions], Transport],
    *,
    on_host: HostStartFn | None = None,
    on_point: PointFn | None = None,
    on_request: RequestFn | None = None,
) -> list[HostBench]:
    results: list[HostBench] = []
    for index, entry in enumerate(hosts):
        if on_host:
            on_host(entry, index, len(hosts))
        try:
            transport = factory(entry, ssh_of(entry))
        except ConfigError as exc:
            results.append(HostBench(host=entry.name, error=str(exc), exit_code=exc.exit_code))
            continue
        try:
            results.append(
                bench_host(
                    transport, options_for(entry, options), label=entry.name, on_point=on_point, on_request=on_request
                )
            )
        finally:
            transport.close()
    return results


def _ssh_transport(entry: HostEntry, options: SSHOptions) -> Transport:
    return SSHTransport(entry.address, options, label=entry.name)


def bench(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    options: BenchOptions | None = None,
    on_host: HostStartFn | None = None,
    on_point: PointFn | None = None,
    on_request: RequestFn | None = None,
    transport_factory: TransportFactory | None = None,
) -> list[HostBench]:
    """`remediate bench` as a function: the long-context sweep of each selected host, one after another,
    read-only on the unit. ``options`` default to the incident's lengths (``1k,8k,32k,46k,92k,185k``)."""
    _, hosts = resolve_hosts(targets, inventory)
    cli_ssh = ssh or SSHOptions()
    return bench_hosts(
        hosts,
        options or BenchOptions(contexts=parse_contexts(DEFAULT_CONTEXTS)),
        lambda entry: ssh_for(entry, cli_ssh),
        transport_factory or _ssh_transport,
        on_host=on_host,
        on_point=on_point,
        on_request=on_request,
    )


def bench_exit_code(results: Sequence[HostBench]) -> int:
    """0 every host swept (skipped points are fine); 3 only unreachable ones failed; 2 only bad input; else 1."""
    failed = [r for r in results if not r.ok]
    if not failed:
        return EXIT_OK
    codes = {r.exit_code or EXIT_FAILED for r in failed}
    if codes == {EXIT_UNREACHABLE}:
        return EXIT_UNREACHABLE
    if codes == {EXIT_BAD_INPUT}:
        return EXIT_BAD_INPUT
    return EXIT_FAILED
