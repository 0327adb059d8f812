"""The Python API. The CLI is a thin layer over these functions; scripts can call them directly.

>>> from remediate import api
>>> rollout = api.remediate_oom(["gpu-*"], inventory="inventory.yaml", canary=1, batch="25%")
>>> [(r.host, r.outcome, r.max_total_num_tokens) for r in rollout.results]

Every function returns one :class:`~remediate.models.HostResult` per selected host (inventory
order) inside a :class:`RolloutResult`; a failing host never raises, it is a result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from remediate.core.unitfile.edit import EditPlan, SourceFile, UnitSources, plan_edit
from remediate.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, ConfigError
from remediate.fleet import budget as fleet_budget
from remediate.fleet import sweep
from remediate.fleet.inventory import HostEntry, Inventory
from remediate.fleet.request import OomRequest
from remediate.fleet.retry import write_retry_file
from remediate.fleet.rollout import Rollout, Strategy
from remediate.fleet.settings import (
    build_strategy,
    desired_state,
    parse_desired_args,
    resolve_hosts,
    run_options_for,
    ssh_for,
)
from remediate.host import localfile
from remediate.host.diagnose import DEFAULT_LINES, diagnose_host, parse_since
from remediate.host.restore import backups_host
from remediate.host.runner import status_host
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import SSHOptions, Transport
from remediate.transport.ssh import SSHTransport

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
    """0 all ok; 3 when every failure is unreachable/auth; 2 when every failure is bad input; else 1."""
    failed = [r for r in results if not r.ok]
    if not failed:
        return EXIT_OK
    codes = {r.exit_code for r in failed}
    if codes == {EXIT_UNREACHABLE}:
        return EXIT_UNREACHABLE
    if codes == {EXIT_BAD_INPUT}:
        return EXIT_BAD_INPUT
    return EXIT_FAILED


def _default_transport(entry: HostEntry, options: SSHOptions) -> Transport:
    # host, user and port go separately: Fabric's "user@host:port" shorthand cannot carry an IPv6 port
    return SSHTransport(entry.address, options, label=entry.name)


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


def remediate_oom_request(
    request: OomRequest,
    *,
    progress: ProgressFn | None = None,
    confirm: Callable[[str], bool] | None = None,
    transport_factory: TransportFactory | None = None,
    stop_when: Callable[[HostResult], str | None] | None = None,
    retry_dir: str | None = None,
) -> RolloutResult:
    """`remediate oom` as a function (the CLI calls this)."""
    inventory, hosts = resolve_hosts(request.targets, request.inventory)
    strategy = build_strategy(request.strategy, inventory)
    per_host = {h.name: run_options_for(h, request) for h in hosts}  # validate all input before touching any host
    return _roll_out(
        hosts,
        inventory,
        strategy,
        request.ssh,
        fleet_budget.oom_job(request, per_host, progress),  # --auto planning; healthy ends are recorded
        dry_run=request.dry_run,
        progress=progress,
        confirm=confirm,
        transport_factory=transport_factory,
        stop_when=stop_when,
        retry_dir=retry_dir,
        retry_file=request.retry_file,
    )


def remediate_oom(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    identity: str | None = None,
    known_hosts: str | None = None,
    accept_new_host_key: bool = False,
    ssh_config: str | None = None,
    sudo: bool = False,
    unit: str | None = None,
    mem_fraction_static: float | str | Decimal | None = None,
    mem_fraction_step: float | str | Decimal | None = None,
    chunked_prefill_size: int | None = None,
    alloc_conf: str | None = None,
    min_tokens: int | None = None,
    target_tokens: int | None = None,
    timeout: float = 900.0,
    dry_run: bool = False,
    rollback: bool = True,
    force: bool = False,
    canary: int | None = None,
    batch: str | None = None,
    forks: int | None = None,
    max_failures: str | int | None = None,
    stop_when: Callable[[HostResult], str | None] | None = None,
    progress: ProgressFn | None = None,
    retry_dir: str | None = None,
    transport_factory: TransportFactory | None = None,
) -> RolloutResult:
    """Remediate the OOM on every selected host; see `remediate oom --help` for the semantics.

    ``stop_when(result) -> reason | None`` is a custom policy: return a reason to halt the
    rollout after any host (e.g. too few tokens); in-flight hosts finish, the rest are not attempted.
    """
    request = OomRequest(
        targets=tuple(targets),
        inventory=inventory,
        ssh=SSHOptions(
            identity=identity,
            known_hosts=known_hosts,
            accept_new_host_key=accept_new_host_key,
            ssh_config=ssh_config,
            sudo=sudo,
        ),
        unit=unit,
        cli_desired=parse_desired_args(
            {
                "mem_fraction_static": mem_fraction_static,
                "mem_fraction_step": mem_fraction_step,
                "chunked_prefill_size": chunked_prefill_size,
                "alloc_conf": alloc_conf,
            }
        ),
        min_tokens=min_tokens,
        target_tokens=target_tokens,
        timeout=timeout,
        dry_run=dry_run,
        rollback=rollback,
        force=force,
        strategy={
            k: v
            for k, v in {"canary": canary, "batch": batch, "forks": forks, "max_failures": max_failures}.items()
            if v is not None
        },
    )
    return remediate_oom_request(
        request, progress=progress, stop_when=stop_when, retry_dir=retry_dir, transport_factory=transport_factory
    )


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


def status(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    transport_factory: TransportFactory | None = None,
) -> list[HostResult]:
    """Per host: unit, state, current fraction/chunk/alloc conf, tokens, and whether it is remediated."""

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        request = OomRequest(unit=unit)
        return status_host(transport, run_options_for(entry, request), label=entry.name)

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, transport_factory=transport_factory)


def diagnose(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    lines: int = DEFAULT_LINES,
    since: str | None = None,
    transport_factory: TransportFactory | None = None,
) -> list[HostResult]:
    """Read-only, no lock: each host's latest failure, why, and the `remediate oom` that fixes it."""
    restarts, since_time = parse_since(since, lines)  # bad input fails before any host is contacted

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        options = run_options_for(entry, OomRequest(unit=unit))
        return diagnose_host(
            transport, options, lines=lines, since=since_time, since_restarts=restarts, label=entry.name
        )

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, transport_factory=transport_factory)


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
) -> RolloutResult:
    """Restore each host's latest backup (or ``to``); a rollback over a group is a rollout too."""
    inventory_obj, hosts = resolve_hosts(targets, inventory)
    if to != "latest" and len(hosts) > 1:
        raise ConfigError("--to PATH names one file: use it with one host")
    plan = build_strategy(strategy or {}, inventory_obj)
    options = {
        h.name: replace(
            run_options_for(h, OomRequest(unit=unit, timeout=timeout, lock_timeout=lock_timeout)), dry_run=dry_run
        )
        for h in hosts
    }
    return _roll_out(
        hosts,
        inventory_obj,
        plan,
        ssh or SSHOptions(),
        fleet_budget.rollback_job(options, to, progress),  # a healthy end is recorded
        dry_run=dry_run,
        progress=progress,
        confirm=confirm,
        transport_factory=transport_factory,
        retry_dir=retry_dir,
        retry_file=retry_file,
    )


def backups(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    prune_keep: int | None = None,
    dry_run: bool = False,
    transport_factory: TransportFactory | None = None,
    lock_timeout: int | None = None,
) -> list[HostResult]:
    """List each host's backups (newest first, with the flag-level difference to the current unit);
    with ``prune_keep``, delete all but the newest N per file (never the newest, never the current state's)."""

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        options = replace(run_options_for(entry, OomRequest(unit=unit, lock_timeout=lock_timeout)), dry_run=dry_run)
        return backups_host(transport, options, label=entry.name, prune_keep=prune_keep)

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, transport_factory=transport_factory)


@dataclass
class EditResult:
    """`remediate edit`: the plan for a local unit file and, with ``write``, the backup taken."""

    path: Path
    plan: EditPlan
    backup: Path | None = None

    @property
    def written(self) -> bool:
        return self.backup is not None


def edit_unit_file(
    unit_file: str | Path,
    *,
    mem_fraction_static: float | str | Decimal | None = None,
    mem_fraction_step: float | str | Decimal | None = None,
    chunked_prefill_size: int | str | None = None,
    alloc_conf: str | None = None,
    write: bool = False,
    now: datetime | None = None,
) -> EditResult:
    """Plan the OOM fix for a local unit file; with ``write``, back it up and replace it atomically.

    Only the given file is edited: a change that belongs in another file (an EnvironmentFile, a drop-in)
    is a ConfigError naming that file, and nothing is written."""
    path = Path(unit_file)
    raw = {
        "mem_fraction_static": mem_fraction_static,
        "mem_fraction_step": mem_fraction_step,
        "chunked_prefill_size": chunked_prefill_size,
        "alloc_conf": alloc_conf,
    }
    try:
        desired = desired_state(parse_desired_args(raw))
    except ConfigError as exc:
        raise ConfigError(exc.message, source=str(path)) from None
    text = localfile.read_unit_file(path)
    sources = UnitSources(fragment=SourceFile(path=str(path), text=text), env_files=None)
    when = now or datetime.now(tz=UTC)
    plan = plan_edit(sources, desired, now=when)
    result = EditResult(path, plan)
    if write and plan.is_changed:
        for change in plan.files:
            if Path(change.path) != path:
                raise ConfigError(f"the change would touch {change.path}; edit that file", source=str(path))
        result.backup = localfile.write_atomically(path, plan.files[0].new_text, backup_epoch=int(when.timestamp()))
    return result


def bench(targets: Sequence[str] = (), **kw: Any) -> list[sweep.HostBench]:
    """`remediate bench`: :func:`remediate.fleet.sweep.bench` (``options``, ``progress``…), SSH by default."""
    return sweep.bench(targets, **{"transport_factory": _default_transport, **kw})


def plan(targets: Sequence[str] = (), *, inventory: str | None = None, **kw: Any) -> list[HostResult]:
    """`remediate plan`, read-only (``kw``: ssh, transport_factory and fleet.budget.plan_job's options)."""
    ssh, factory = kw.pop("ssh", None) or SSHOptions(), kw.pop("transport_factory", None)
    return for_each_host(targets, inventory, ssh, fleet_budget.plan_job(**kw), transport_factory=factory)
