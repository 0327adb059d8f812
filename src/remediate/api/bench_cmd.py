"""The API of `bench`: the sweep's request, its run over hosts, its files (``api.bench`` and its names).

Apart from the other read-only commands so that `status` does not load the sweep's modules. The
module is not named ``bench``: a submodule ``api.bench`` would shadow the function ``api.bench``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from remediate.api.hosts import TransportFactory, transports
from remediate.core.bench.record import RunArgs
from remediate.core.bench.sweep import parse_contexts
from remediate.core.units import single_unit
from remediate.fleet import bench as fleet_bench
from remediate.fleet import bench_files
from remediate.fleet.bench import DEFAULT_CONTEXTS, DEFAULT_GEN, BenchRequest, HostBench, SweepProgress
from remediate.host.bench.bench import BenchOptions
from remediate.transport.base import SSHOptions

__all__ = [
    "DEFAULT_CONTEXTS",
    "DEFAULT_GEN",
    "BenchOptions",
    "BenchRequest",
    "HostBench",
    "bench",
    "bench_request",
    "finish_bench",
]


def bench(
    request: BenchRequest,
    *,
    transport_factory: TransportFactory | None = None,
    progress: SweepProgress | None = None,
) -> list[HostBench]:
    """`remediate bench`: each host's sweep, read-only on the unit; the ``request`` (:func:`bench_request`)
    gives the targets, inventory, SSH options and the sweep (lengths, runs…, default the incident's)."""
    return fleet_bench.bench(request, progress=progress, transport_factory=transports(transport_factory))


def bench_request(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    contexts: str = DEFAULT_CONTEXTS,
    gen: int = DEFAULT_GEN,
    runs: int = 1,
    warmup: int = 0,
    seed: int | None = None,
    output: str | None = None,
    csv_path: str | None = None,
    plot: str | None = None,
) -> BenchRequest:
    """What `remediate bench` is asked, checked: a bad length is a ConfigError naming its flag, and every output
    file (and ``plot``'s matplotlib) is checked before any host is contacted. No seed → a fresh one."""
    seed = seed if seed is not None else secrets.randbelow(2**31)
    args = RunArgs(parse_contexts(contexts), gen, runs, warmup, seed)
    options = BenchOptions(args.contexts, args.gen, args.runs, args.warmup, seed, unit=single_unit(unit, "bench"))
    request = BenchRequest(args, options, ssh or SSHOptions(), tuple(targets), inventory, output, csv_path, plot)
    bench_files.check_outputs(request.output, request.csv_path, request.plot)
    return request


def finish_bench(results: Sequence[HostBench], request: BenchRequest, *, version: str) -> int:
    """The end of `remediate bench`: write the files the request names; the exit code."""
    bench_files.write_outputs(results, request, version=version)
    return fleet_bench.bench_exit_code(results)
