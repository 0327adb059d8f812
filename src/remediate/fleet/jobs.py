"""The job plumbing of every fleet command: a per-host job (one host's function over its one transport),
its connections (the first batch's started ahead), the rollout that runs it, and the job factories of
`oom`, `rollback` and `plan`.

A job is ``(transport, inventory entry) -> HostResult``. :func:`roll_out` runs a mutating job as a
rollout (canary, batches, failure budget; fleet/rollout.py) and writes the retry file; :func:`for_each_host`
runs a read-only one ``forks`` at a time. Both connect their first hosts ahead (:class:`ConnectAhead`); the
factories import their host modules when they are called, the read-only jobs on their first call, so the
handshakes overlap that import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remediate.controller.observations import append_observation, log_path, read_observations
from remediate.errors import ConfigError, RemediateError
from remediate.fleet.inventory import HostEntry, Inventory
from remediate.fleet.oom_auto import with_auto
from remediate.fleet.request import OomRequest, PlanRequest, StrategyArgs
from remediate.fleet.retry import write_retry_file
from remediate.fleet.rollout import Rollout, Strategy, plan_batches
from remediate.fleet.settings import build_strategy, resolve_hosts, ssh_for, unit_options_for
from remediate.host.common.options import BudgetOptions, RunOptions
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import SSHOptions, Transport
from remediate.transport.preconnect import Preconnect, resolve

TransportFactory = Callable[[HostEntry, SSHOptions], Transport]
"""Opens a host's one connection: ``(inventory entry, resolved SSH options) -> Transport``. Every remote
function takes one as ``transport_factory`` (the api's default: SSH), so scripts and tests can bring their own."""

Job = Callable[[Transport, HostEntry], HostResult]


@dataclass
class RolloutResult:
    """A rollout's end: one result per host (inventory order), its batches, why it halted, the retry file."""

    results: list[HostResult]
    batches: list[list[str]] = field(default_factory=list)
    halted: str | None = None
    interrupted: bool = False
    retry_file: str | None = None
    warnings: list[str] = field(default_factory=list)  # the rollout's own, said once (not each host's)

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
                "warnings": self.warnings,
            }
        }


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

    def __init__(self, factory: TransportFactory, *, preconnect: bool = False) -> None:
        self._factory = factory
        self._ssh = preconnect  # the SSH transport's: open the TCP connections first (transport/preconnect.py)
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
        left = list(first)  # the TCP connections not handed to a transport yet (a transport closes its own)
        try:
            while left:
                entry, options, pre = left[0]
                try:
                    transport = self._factory(entry, options)
                except ConfigError:
                    left.pop(0)
                    if pre is not None:
                        pre.close()
                    continue  # the host's work reports it, as it would without the head start
                left.pop(0)
                if pre is not None:
                    transport.preconnected(pre)
                self._ready[entry.name] = transport
                transport.open_ahead()
        except BaseException:
            # A bug or a Ctrl-C: the caller never gets this object to close, so what was started is closed here.
            for _, _, pre in left:
                if pre is not None:
                    pre.close()
            self.close()
            raise
        return self

    def __call__(self, entry: HostEntry, options: SSHOptions) -> Transport:
        return self._ready.pop(entry.name, None) or self._factory(entry, options)

    def close(self) -> None:
        while self._ready:
            self._ready.popitem()[1].close()


def safely(entry: HostEntry, fn: Callable[[], HostResult]) -> HostResult:
    """Input errors found per host (bad inventory values) become that host's result, not a crash."""
    try:
        return fn()
    except ConfigError as exc:
        return HostResult(host=entry.name, outcome="failed", error=str(exc), exit_code=exc.exit_code)


def connected(
    job: Callable[[Transport, HostEntry], HostResult],
    ssh: SSHOptions,
    factory: TransportFactory,
) -> Callable[[HostEntry], HostResult]:
    """Wrap a per-host job: open the host's one connection, run the job, always close it."""

    def work(entry: HostEntry) -> HostResult:
        def go() -> HostResult:
            transport = factory(entry, ssh_for(entry, ssh))
            try:
                return job(transport, entry)
            finally:
                transport.close()

        return safely(entry, go)

    return work


@dataclass(frozen=True)
class Fleet:
    """The hosts of one rollout and how each is reached."""

    hosts: list[HostEntry]
    inventory: Inventory | None  # None: ad-hoc targets (no retry file)
    strategy: Strategy
    ssh: SSHOptions
    transport_factory: TransportFactory


@dataclass(frozen=True)
class Hooks:
    """The caller's say during a rollout: progress lines, the canary's question, a custom halt policy."""

    progress: ProgressFn | None = None
    confirm: Callable[[str], bool] | None = None
    stop_when: Callable[[HostResult], str | None] | None = None


@dataclass(frozen=True)
class RetryTarget:
    """Where the retry inventory goes: ``path`` (--retry-file), else ``directory``, else the state dir's retry/."""

    directory: str | None = None
    path: str | None = None


def roll_out(fleet: Fleet, job: Job, *, hooks: Hooks = Hooks(), retry: RetryTarget | None = None) -> RolloutResult:
    """Run a mutating per-host job as a rollout, one connection per host, and write the retry file (inventory
    rollouts only; ``retry`` None, as for a dry run, writes none)."""
    work = connected(job, fleet.ssh, fleet.transport_factory)
    progress = hooks.progress
    events = (lambda text: progress("rollout", "", text)) if progress and len(fleet.hosts) > 1 else None
    results, rollout = run_on_hosts(
        fleet.hosts, work, fleet.strategy, confirm=hooks.confirm, on_event=events, stop_when=hooks.stop_when
    )
    written, warnings = None, []
    if retry is not None:
        try:
            written = write_retry_file(fleet.inventory, results, retry.directory, path=retry.path)
        except ConfigError as exc:  # written after the hosts were changed: a warning, never a reason to lose them
            warnings.append(f"retry file not written: {exc}")
    return RolloutResult(flatten(results), rollout.batches, rollout.halted, rollout.interrupted, written, warnings)


def for_each_host(
    targets: Sequence[str],
    inventory_path: str | None,
    ssh: SSHOptions,
    fn: Callable[[Transport, HostEntry], HostResult],
    *,
    forks: int | None = None,
    transport_factory: TransportFactory,
    preconnect: bool = False,
) -> list[HostResult]:
    """Run a read-only per-host function over the selected hosts, ``forks`` at a time (None: the inventory's
    ``rollout: forks``, else 10), every host at once when there are no more: no canary, no failure budget.

    The first ``forks`` hosts connect ahead, as `oom`'s first batch does (:class:`ConnectAhead`; over SSH
    with ``preconnect``, the TCP connections before paramiko's import): their handshakes overlap the import
    of ``fn``'s host modules, which ``fn`` loads on its first call. What no host took is closed."""
    inventory, hosts = resolve_hosts(targets, inventory_path)
    at_once = build_strategy(StrategyArgs(forks=forks), inventory).forks
    strategy = Strategy(canary=0, forks=at_once, max_failures="100%")
    ahead = ConnectAhead(transport_factory, preconnect=preconnect).start(hosts, strategy, ssh)
    try:
        results, _ = run_on_hosts(hosts, connected(fn, ssh, ahead), strategy)
    finally:
        ahead.close()
    return flatten(results)


# -- the jobs of `oom`, `rollback` and `plan` ----------------------------------------


def observed(transport: Transport, result: HostResult, command: str, log: Path) -> HostResult:
    """After a unit ends healthy, read what its server measured and append it to the calibration log."""
    from remediate.host.plan.observe import observe

    if not result.ok or result.is_dry_run:
        return result
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        record = observe(transport, result, command=command, at=at)
        if record is not None:
            append_observation(log, record)
            result.observation = str(log)
    except (RemediateError, OSError) as exc:
        result.warnings.append(f"the observation was not recorded in {log}: {exc}")
    return result


def observing(job: Job, command: str, log: Path) -> Job:
    """A job whose healthy end is recorded in the calibration log (:func:`observed`)."""
    return lambda transport, entry: observed(transport, job(transport, entry), command, log)


def flatten(results: Sequence[HostResult]) -> list[HostResult]:
    """One result per host and unit: a host that ran several units (host/units.py) gives one row each."""
    return [one for result in results for one in (result.units or [result])]


def plan_job(request: PlanRequest) -> Job:
    """The read-only `plan` of one host (inventory host vars give the unit, port and target)."""
    margin, chunked_prefill_size = request.margin, request.chunked_prefill_size
    if not 0 <= margin < 10:
        raise ConfigError(f"--margin {margin} must be between 0 and 10 (a share: 0.10 = 10%)")
    records = read_observations(log_path(request.observations))

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.plan.plan import plan_host  # on the first call: the handshakes are under way meanwhile
        from remediate.host.units import each_unit

        options = unit_options_for(entry, request.unit, target_tokens=request.target_tokens)
        budget = BudgetOptions(
            target_tokens=options.target_tokens,
            chunked_prefill_size=chunked_prefill_size,
            chunk_is_ceiling=chunked_prefill_size is None,
            margin=margin,
            observations=records,
        )
        return each_unit(transport, options, lambda t, o: plan_host(t, o, budget, label=entry.name), label=entry.name)

    return one


def oom_job(request: OomRequest, per_host: dict[str, RunOptions], progress: ProgressFn | None) -> Job:
    """`oom` on one host: with ``--auto`` each host plans from its own evidence; a healthy end is recorded."""
    from remediate.host.oom.runner import remediate_host
    from remediate.host.units import each_unit

    log = log_path(request.observations)
    options = with_auto(per_host, request, log)

    def job(transport: Transport, entry: HostEntry) -> HostResult:
        def one(t: Transport, o: RunOptions) -> HostResult:
            return observed(t, remediate_host(t, o, label=entry.name, progress=progress), "oom", log)

        return each_unit(transport, options[entry.name], one, label=entry.name, crashed_only=True)

    return job


def rollback_job(options: dict[str, RunOptions], to: str, progress: ProgressFn | None) -> Job:
    """`rollback` on one host; a healthy end is recorded in the calibration log."""
    from remediate.host.rollback.restore import rollback_host
    from remediate.host.units import each_unit

    log = log_path(None)

    def job(transport: Transport, entry: HostEntry) -> HostResult:
        def one(t: Transport, o: RunOptions) -> HostResult:
            return observed(t, rollback_host(t, o, to=to, label=entry.name, progress=progress), "rollback", log)

        # No unit named and several found stays a refusal: a rollback restores what the user names.
        return each_unit(transport, options[entry.name], one, label=entry.name, detect=False, command="rollback")

    return job
