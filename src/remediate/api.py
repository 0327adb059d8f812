"""The Python API. The CLI is a thin layer over these functions; scripts can call them directly.

>>> from remediate import api
>>> rollout = api.remediate_oom(["gpu-*"], inventory="inventory.yaml", canary=1, batch="25%")
>>> [(r.host, r.outcome, r.max_total_num_tokens) for r in rollout.results]

Every function returns one :class:`~remediate.models.HostResult` per selected host (inventory
order) inside a :class:`RolloutResult`; a failing host never raises, it is a result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from remediate import fleet
from remediate.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, ConfigError
from remediate.inventory import HostEntry, Inventory, dump_inventory, load_inventory
from remediate.models import HostResult, RunOptions
from remediate.runner import remediate_host
from remediate.transport.base import Transport
from remediate.transport.ssh import SSHOptions, SSHTransport
from remediate.unitfile.edit import DesiredState, validate_desired

ProgressFn = Callable[[str, str, str], None]
TransportFactory = Callable[[HostEntry, SSHOptions], Transport]


@dataclass(frozen=True)
class OomRequest:
    """Everything `remediate oom` was asked to do (CLI values; None = not given)."""

    targets: tuple[str, ...] = ()
    inventory: str | None = None
    ssh: SSHOptions = field(default_factory=SSHOptions)
    unit: str | None = None
    cli_desired: dict[str, Any] = field(default_factory=dict)
    min_tokens: int | None = None
    target_tokens: int | None = None
    timeout: float = 900.0
    dry_run: bool = False
    rollback: bool = True
    strategy: dict[str, Any] = field(default_factory=dict)


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


def strategy_from_cli(kw: dict[str, Any]) -> dict[str, Any]:
    return {
        key: kw.get(key)
        for key in ("canary", "batch", "forks", "max_failures", "pause_after_canary")
        if kw.get(key) not in (None, False)
    }


def build_strategy(cli: dict[str, Any], inventory: Inventory | None) -> fleet.Strategy:
    """CLI > inventory ``rollout:`` > defaults."""
    merged: dict[str, Any] = {**(inventory.rollout if inventory else {}), **cli}
    strategy = fleet.Strategy()
    if "canary" in merged:
        canary = int(merged["canary"])
        if canary < 0:
            raise ConfigError("--canary must be ≥ 0")
        strategy = replace(strategy, canary=canary)
    if "batch" in merged:
        strategy = replace(strategy, batch=fleet.parse_batch(merged["batch"]))
    if "forks" in merged:
        forks = int(merged["forks"])
        if forks < 1:
            raise ConfigError("--forks must be at least 1")
        strategy = replace(strategy, forks=forks)
    if "max_failures" in merged:
        fleet.failure_budget(str(merged["max_failures"]), 1)
        strategy = replace(strategy, max_failures=str(merged["max_failures"]))
    if merged.get("pause_after_canary"):
        strategy = replace(strategy, pause_after_canary=True)
    return strategy


def resolve_hosts(targets: Sequence[str], inventory_path: str | None) -> tuple[Inventory | None, list[HostEntry]]:
    """Targets → hosts. With an inventory (``-i`` or ./inventory.yaml), names, groups, globs and ``all``."""
    path = inventory_path
    if path is None and Path("inventory.yaml").is_file() and (not targets or not _all_addresses(targets)):
        path = "inventory.yaml"
    if path is None:
        if not targets:
            raise ConfigError("no target given (a host, or -i inventory.yaml with names, groups or 'all')")
        return None, [HostEntry(name=t, address=t) for t in targets]
    inventory = load_inventory(path)
    hosts = inventory.select(list(targets))
    if not hosts:
        raise ConfigError(f"no host matches {' '.join(targets) or 'all'}", source=path)
    return inventory, hosts


def _all_addresses(targets: Sequence[str]) -> bool:
    return all("@" in t or t[:1].isdigit() or t.startswith("[") for t in targets)


def _ssh_for(entry: HostEntry, cli: SSHOptions) -> SSHOptions:
    s = entry.settings
    return SSHOptions(
        identity=cli.identity or _expand(s.get("identity")),
        known_hosts=cli.known_hosts or _expand(s.get("known_hosts")),
        accept_new_host_key=cli.accept_new_host_key,
        ssh_config=cli.ssh_config,
        sudo=cli.sudo or bool(s.get("sudo")),
        connect_timeout=cli.connect_timeout,
        user=cli.user,
        port=cli.port,
    )


def _expand(value: Any) -> str | None:
    return os.path.expanduser(str(value)) if value else None


def _default_transport(entry: HostEntry, options: SSHOptions) -> Transport:
    return SSHTransport(entry.target, options, label=entry.name)


def parse_desired_args(raw: dict[str, Any]) -> dict[str, Any]:
    """Command-line strings → typed desired-state values; a bad one is a ConfigError naming its flag."""
    out: dict[str, Any] = {}
    for key in ("mem_fraction_static", "mem_fraction_step"):
        value = raw.get(key)
        if value is None or isinstance(value, Decimal):
            out[key] = value
            continue
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            number = Decimal("NaN")
        if not number.is_finite():
            raise ConfigError(f"--{key.replace('_', '-')} {value!r} is not a number")
        out[key] = number
    chunk = raw.get("chunked_prefill_size")
    if chunk is not None and not isinstance(chunk, int):
        try:
            chunk = int(str(chunk))
        except ValueError:
            raise ConfigError(f"--chunked-prefill-size {chunk!r} is not an integer") from None
    out["chunked_prefill_size"] = chunk
    out["alloc_conf"] = raw.get("alloc_conf")
    return out


def desired_state(cli_desired: dict[str, Any], settings: dict[str, Any] | None = None) -> DesiredState:
    """CLI > inventory host vars > inventory defaults (``settings``, already merged) > built-in."""
    s = settings or {}
    kwargs: dict[str, Any] = {}
    fraction = cli_desired.get("mem_fraction_static")
    if fraction is None and s.get("mem_fraction_static") is not None:
        fraction = Decimal(str(s["mem_fraction_static"]))
    if fraction is not None:
        kwargs["mem_fraction_static"] = Decimal(str(fraction))
    if cli_desired.get("mem_fraction_step") is not None:
        kwargs["mem_fraction_step"] = Decimal(str(cli_desired["mem_fraction_step"]))
    chunk = cli_desired.get("chunked_prefill_size")
    if chunk is None:
        chunk = s.get("chunked_prefill_size")
    if chunk is not None:
        kwargs["chunked_prefill_size"] = int(chunk)
        kwargs["chunk_is_ceiling"] = False
    conf = cli_desired.get("alloc_conf") or s.get("alloc_conf")
    if conf:
        kwargs["alloc_conf"] = str(conf)
    if "mem_fraction_step" in kwargs:
        if cli_desired.get("mem_fraction_static") is not None:
            raise ConfigError("--mem-fraction-static and --mem-fraction-step are mutually exclusive")
        kwargs.pop("mem_fraction_static", None)  # a step on the command line beats an inventory fraction
    desired = DesiredState(**kwargs)
    validate_desired(desired)
    return desired


def desired_for(entry: HostEntry, cli_desired: dict[str, Any]) -> DesiredState:
    return desired_state(cli_desired, entry.settings)


def run_options_for(entry: HostEntry, request: OomRequest) -> RunOptions:
    s = entry.settings
    return RunOptions(
        desired=desired_for(entry, request.cli_desired),
        unit=request.unit or s.get("unit"),
        min_tokens=request.min_tokens if request.min_tokens is not None else s.get("min_tokens"),
        target_tokens=request.target_tokens if request.target_tokens is not None else s.get("target_tokens"),
        timeout=request.timeout,
        dry_run=request.dry_run,
        rollback=request.rollback,
        server_port=s.get("server_port"),
    )


def write_retry_file(inventory: Inventory | None, results: Sequence[HostResult], directory: str = ".") -> str | None:
    """``remediate-retry-<UTC>.yaml`` holding the failed and not-attempted hosts, usable as ``-i``."""
    names = [r.host for r in results if not r.ok]
    if not names:
        return None
    inv = inventory or Inventory(path="(command line)")
    path = Path(directory).resolve() / f"remediate-retry-{fleet.now_stamp()}.yaml"
    n = 1
    while path.exists():
        path = Path(directory).resolve() / f"remediate-retry-{fleet.now_stamp()}-{n}.yaml"
        n += 1
    header = "# remediate retry file: the hosts that failed or were not attempted. Use it with -i.\n"
    path.write_text(header + dump_inventory(inv, names), encoding="utf-8")
    return str(path)


def run_on_hosts(
    hosts: list[HostEntry],
    work: Callable[[HostEntry], HostResult],
    strategy: fleet.Strategy,
    *,
    confirm: Callable[[str], bool] | None = None,
    on_event: Callable[[str], None] | None = None,
    stop_when: Callable[[HostResult], str | None] | None = None,
) -> tuple[list[HostResult], fleet.Rollout[HostEntry]]:
    rollout = fleet.Rollout(
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


def remediate_oom_request(
    request: OomRequest,
    *,
    progress: ProgressFn | None = None,
    confirm: Callable[[str], bool] | None = None,
    transport_factory: TransportFactory | None = None,
    stop_when: Callable[[HostResult], str | None] | None = None,
    retry_dir: str = ".",
) -> RolloutResult:
    """`remediate oom` as a function (the CLI calls this)."""
    inventory, hosts = resolve_hosts(request.targets, request.inventory)
    strategy = build_strategy(request.strategy, inventory)
    factory = transport_factory or _default_transport
    per_host = {h.name: run_options_for(h, request) for h in hosts}  # validate all input before touching any host

    def work(entry: HostEntry) -> HostResult:
        def go() -> HostResult:
            transport = factory(entry, _ssh_for(entry, request.ssh))
            try:
                return remediate_host(transport, per_host[entry.name], label=entry.name, progress=progress)
            finally:
                transport.close()

        return _safely(entry, go)

    events = (lambda text: progress("rollout", "", text)) if progress and len(hosts) > 1 else None
    results, rollout = run_on_hosts(hosts, work, strategy, confirm=confirm, on_event=events, stop_when=stop_when)
    retry = None if request.dry_run else write_retry_file(inventory, results, retry_dir)
    return RolloutResult(
        results=results,
        batches=rollout.batches,
        halted=rollout.halted,
        interrupted=rollout.interrupted,
        retry_file=retry,
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
    canary: int | None = None,
    batch: str | None = None,
    forks: int | None = None,
    max_failures: str | int | None = None,
    stop_when: Callable[[HostResult], str | None] | None = None,
    progress: ProgressFn | None = None,
    retry_dir: str = ".",
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
        cli_desired={
            "mem_fraction_static": None if mem_fraction_static is None else Decimal(str(mem_fraction_static)),
            "mem_fraction_step": None if mem_fraction_step is None else Decimal(str(mem_fraction_step)),
            "chunked_prefill_size": chunked_prefill_size,
            "alloc_conf": alloc_conf,
        },
        min_tokens=min_tokens,
        target_tokens=target_tokens,
        timeout=timeout,
        dry_run=dry_run,
        rollback=rollback,
        strategy={
            k: v
            for k, v in {"canary": canary, "batch": batch, "forks": forks, "max_failures": max_failures}.items()
            if v is not None
        },
    )
    return remediate_oom_request(request, progress=progress, stop_when=stop_when, retry_dir=retry_dir)


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
    factory = transport_factory or _default_transport

    def work(entry: HostEntry) -> HostResult:
        def go() -> HostResult:
            transport = factory(entry, _ssh_for(entry, ssh))
            try:
                return fn(transport, entry)
            finally:
                transport.close()

        return _safely(entry, go)

    results, _ = run_on_hosts(hosts, work, fleet.Strategy(canary=0, forks=forks, max_failures="100%"))
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
    from remediate.runner import status_host

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        request = OomRequest(unit=unit)
        return status_host(transport, run_options_for(entry, request), label=entry.name)

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
    retry_dir: str = ".",
) -> RolloutResult:
    """Restore each host's latest backup (or ``to``); a rollback over a group is a rollout too."""
    from remediate.restore import rollback_host

    inventory_obj, hosts = resolve_hosts(targets, inventory)
    if to != "latest" and len(hosts) > 1:
        raise ConfigError("--to PATH names one file: use it with one host")
    plan = build_strategy(strategy or {}, inventory_obj)
    factory = transport_factory or _default_transport
    options = {
        h.name: replace(run_options_for(h, OomRequest(unit=unit, timeout=timeout)), dry_run=dry_run) for h in hosts
    }

    def work(entry: HostEntry) -> HostResult:
        def go() -> HostResult:
            transport = factory(entry, _ssh_for(entry, ssh or SSHOptions()))
            try:
                return rollback_host(transport, options[entry.name], to=to, label=entry.name, progress=progress)
            finally:
                transport.close()

        return _safely(entry, go)

    events = (lambda text: progress("rollout", "", text)) if progress and len(hosts) > 1 else None
    results, rollout = run_on_hosts(hosts, work, plan, confirm=confirm, on_event=events)
    retry = None if dry_run else write_retry_file(inventory_obj, results, retry_dir)
    return RolloutResult(results, rollout.batches, rollout.halted, rollout.interrupted, retry)


def backups(
    targets: Sequence[str] = (),
    *,
    inventory: str | None = None,
    ssh: SSHOptions | None = None,
    unit: str | None = None,
    prune_keep: int | None = None,
    dry_run: bool = False,
    transport_factory: TransportFactory | None = None,
) -> list[HostResult]:
    """List each host's backups (newest first, with the flag-level difference to the current unit);
    with ``prune_keep``, delete all but the newest N per file (never the newest, never the current state's)."""
    from remediate.restore import backups_host

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        options = replace(run_options_for(entry, OomRequest(unit=unit)), dry_run=dry_run)
        return backups_host(transport, options, label=entry.name, prune_keep=prune_keep)

    return for_each_host(targets, inventory, ssh or SSHOptions(), one, transport_factory=transport_factory)
