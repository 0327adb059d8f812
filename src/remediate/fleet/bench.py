"""``remediate bench`` over the selected hosts: one after another, never two at once (a benchmark that
shares the client, or a host's neighbours, measures the sharing), one connection per host."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from remediate.core.bench.record import RunArgs
from remediate.core.bench.sweep import DEFAULT_CONTEXTS as DEFAULT_CONTEXTS
from remediate.core.bench.sweep import DEFAULT_GEN as DEFAULT_GEN
from remediate.core.bench.sweep import BenchPoint
from remediate.core.bench.sweep import HostBench as HostBench
from remediate.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, ConfigError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.jobs import TransportFactory
from remediate.fleet.settings import resolve_hosts, ssh_for
from remediate.host.bench.bench import BenchOptions, bench_host
from remediate.transport.base import SSHOptions


class SweepProgress(Protocol):
    """What a sweep reports as it goes (the CLI's progress bar implements it)."""

    def host(self, entry: HostEntry, index: int, count: int) -> None: ...

    def request(self, host: str, requested: int, run: int) -> None: ...

    def point(self, bench: HostBench, point: BenchPoint) -> None: ...


@dataclass(frozen=True)
class BenchRequest:
    """What `remediate bench` was asked: the sweep and the files to write."""

    args: RunArgs
    options: BenchOptions
    ssh: SSHOptions = SSHOptions()
    targets: tuple[str, ...] = ()
    inventory: str | None = None
    output: str | None = None
    csv_path: str | None = None
    plot: str | None = None


def options_for(entry: HostEntry, options: BenchOptions) -> BenchOptions:
    """Command line > inventory host vars > defaults, for what ``bench`` reads from the inventory."""
    s = entry.settings
    return replace(options, unit=options.unit or s.get("unit"), server_port=options.server_port or s.get("server_port"))


def bench_hosts(
    hosts: Sequence[HostEntry],
    options: BenchOptions,
    ssh_of: Callable[[HostEntry], SSHOptions],
    factory: TransportFactory,
    progress: SweepProgress | None = None,
) -> list[HostBench]:
    results: list[HostBench] = []
    for index, entry in enumerate(hosts):
        if progress:
            progress.host(entry, index, len(hosts))
        try:
            transport = factory(entry, ssh_of(entry))
        except ConfigError as exc:
            results.append(HostBench(host=entry.name, error=str(exc), exit_code=exc.exit_code))
            continue
        try:
            one = options_for(entry, options)
            on_point = progress.point if progress else None
            on_request = progress.request if progress else None
            results.append(bench_host(transport, one, label=entry.name, on_point=on_point, on_request=on_request))
        finally:
            transport.close()
    return results


def bench(
    request: BenchRequest,
    *,
    progress: SweepProgress | None = None,
    transport_factory: TransportFactory,
) -> list[HostBench]:
    """`remediate bench` as a function: the long-context sweep of each host the request selects, one after
    another, read-only on the unit. ``api.bench`` is this with the SSH transport by default."""
    _, hosts = resolve_hosts(request.targets, request.inventory)
    return bench_hosts(
        hosts,
        request.options,
        lambda entry: ssh_for(entry, request.ssh),
        transport_factory,
        progress,
    )


def bench_exit_code(results: Sequence[HostBench]) -> int:
    """0 every host swept (skipped points are fine); 3 only unreachable hosts failed; 2 only bad input; else 1."""
    failed = [r for r in results if not r.ok]
    if not failed:
        return EXIT_OK
    codes = {r.exit_code or EXIT_FAILED for r in failed}
    if codes == {EXIT_UNREACHABLE}:
        return EXIT_UNREACHABLE
    if codes == {EXIT_BAD_INPUT}:
        return EXIT_BAD_INPUT
    return EXIT_FAILED
