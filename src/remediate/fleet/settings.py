"""Per-host settings: which hosts a target names, and what each is asked to do and how to reach it.

Precedence everywhere: command line > inventory host vars > inventory defaults > built-in. Every value
is validated here, before any host is contacted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import fields, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from remediate.core.engines import DEFAULT, ENGINES
from remediate.core.unitfile.edit import DesiredState, validate_desired
from remediate.errors import ConfigError
from remediate.fleet import rollout
from remediate.fleet.inventory import HostEntry, Inventory, adhoc_host, load_inventory
from remediate.fleet.request import DesiredArgs, OomRequest, StrategyArgs
from remediate.host.common.options import LOCK_WAIT_S, SMI_TIMEOUT_S, RunOptions
from remediate.transport.base import SSHOptions


def _count(merged: dict[str, Any], key: str, minimum: int) -> int:
    value = int(merged[key])
    if value < minimum:
        raise ConfigError(f"--{key.replace('_', '-')} must be at least {minimum}")
    return value


def build_strategy(cli: StrategyArgs, inventory: Inventory | None) -> rollout.Strategy:
    """CLI > inventory ``rollout:`` > defaults."""
    given = {f.name: getattr(cli, f.name) for f in fields(cli) if getattr(cli, f.name) is not None}
    merged: dict[str, Any] = {**(inventory.rollout if inventory else {}), **given}
    strategy = rollout.Strategy()
    if "canary" in merged:
        strategy = replace(strategy, canary=_count(merged, "canary", 0))
    if "batch" in merged:
        strategy = replace(strategy, batch=rollout.parse_batch(merged["batch"]))
    if "forks" in merged:
        strategy = replace(strategy, forks=_count(merged, "forks", 1))
    if "max_failures" in merged:
        rollout.failure_budget(str(merged["max_failures"]), 1)
        strategy = replace(strategy, max_failures=str(merged["max_failures"]))
    if merged.get("pause_after_canary"):
        strategy = replace(strategy, pause_after_canary=True)
    return strategy


class LocalTarget(str):
    """This machine as the target (`--local`), named by its hostname: no inventory is read for it (not even
    ./inventory.yaml), and its transport is the local one (api/hosts.py)."""

    __slots__ = ()


def resolve_hosts(targets: Sequence[str], inventory_path: str | None) -> tuple[Inventory | None, list[HostEntry]]:
    """Targets → hosts. With an inventory (``-i`` or ./inventory.yaml), names, groups, globs and ``all``;
    a :class:`LocalTarget` is this machine, without one."""
    if any(isinstance(t, LocalTarget) for t in targets):
        if len(targets) != 1 or inventory_path is not None:
            raise ConfigError("--local is this machine alone: no other target, no inventory")
        return None, [HostEntry(name=str(targets[0]), address="localhost")]
    path = inventory_path
    if path is None and Path("inventory.yaml").is_file() and (not targets or not _all_addresses(targets)):
        path = "inventory.yaml"
    if path is None:
        if not targets:
            raise ConfigError("no target given (a host, or -i inventory.yaml with names, groups or 'all')")
        return None, [adhoc_host(t) for t in targets]
    if not targets:
        # A fleet-wide change is asked for by name, as in Ansible and kubectl: never by omission.
        raise ConfigError("name the hosts: a host, a group, a glob or `all`", source=path)
    inventory = load_inventory(path)
    hosts = inventory.select(list(targets))
    if not hosts:
        raise ConfigError(f"no host matches {' '.join(targets) or 'all'}", source=path)
    return inventory, hosts


def _all_addresses(targets: Sequence[str]) -> bool:
    return all("@" in t or t[:1].isdigit() or t.startswith("[") for t in targets)


def ssh_for(entry: HostEntry, cli: SSHOptions) -> SSHOptions:
    s = entry.settings
    return SSHOptions(
        identity=cli.identity or _expand(s.get("identity")),
        known_hosts=cli.known_hosts or _expand(s.get("known_hosts")),
        accept_new_host_key=cli.accept_new_host_key,
        ssh_config=cli.ssh_config,
        sudo=cli.sudo or bool(s.get("sudo")),
        connect_timeout=cli.connect_timeout,
        connect_attempts=cli.connect_attempts,
        user=cli.user or s.get("user"),
        port=cli.port or s.get("port"),
    )


def _expand(value: Any) -> str | None:
    return os.path.expanduser(str(value)) if value else None


def parse_desired_args(
    *,
    mem_fraction_static: float | str | Decimal | None = None,
    mem_fraction_step: float | str | Decimal | None = None,
    chunked_prefill_size: int | str | None = None,
    alloc_conf: str | None = None,
) -> DesiredArgs:
    """Command-line strings → typed desired-state values; a bad one is a ConfigError naming its flag."""
    chunk = chunked_prefill_size
    if chunk is not None and not isinstance(chunk, int):
        try:
            chunk = int(str(chunk))
        except ValueError:
            raise ConfigError(f"--chunked-prefill-size {chunk!r} is not an integer") from None
    return DesiredArgs(
        mem_fraction_static=_decimal("mem_fraction_static", mem_fraction_static),
        mem_fraction_step=_decimal("mem_fraction_step", mem_fraction_step),
        chunked_prefill_size=chunk,
        alloc_conf=alloc_conf,
    )


def _decimal(key: str, value: float | str | Decimal | None) -> Decimal | None:
    if value is None or isinstance(value, Decimal):
        return value
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite():
        raise ConfigError(f"--{key.replace('_', '-')} {value!r} is not a number")
    return number


def desired_state(cli_desired: DesiredArgs, settings: dict[str, Any] | None = None) -> DesiredState:
    """CLI > inventory host vars > inventory defaults (``settings``, already merged) > built-in."""
    s = settings or {}
    kwargs: dict[str, Any] = {}
    fraction = cli_desired.mem_fraction_static
    if fraction is None and s.get("mem_fraction_static") is not None:
        fraction = Decimal(str(s["mem_fraction_static"]))
    if fraction is not None:
        kwargs["mem_fraction_static"] = Decimal(str(fraction))
    if cli_desired.mem_fraction_step is not None:
        kwargs["mem_fraction_step"] = Decimal(str(cli_desired.mem_fraction_step))
    chunk = cli_desired.chunked_prefill_size
    if chunk is None:
        chunk = s.get("chunked_prefill_size")
    if chunk is not None:
        kwargs["chunked_prefill_size"] = int(chunk)
        kwargs["chunk_is_ceiling"] = False
    conf = cli_desired.alloc_conf or s.get("alloc_conf")
    if conf:
        kwargs["alloc_conf"] = str(conf)
    # Keys named for an engine (its own flags' names: vLLM's gpu_memory_utilization, max_num_batched_tokens) apply
    # to its units only, over the neutral ones (the default engine's names); the command line beats both.
    has_step = "mem_fraction_step" in kwargs
    if has_step:
        if cli_desired.mem_fraction_static is not None:
            raise ConfigError("--mem-fraction-static and --mem-fraction-step are mutually exclusive")
        kwargs.pop("mem_fraction_static", None)  # a step on the command line beats an inventory fraction
    named: list[tuple[str, Decimal | None, int | None]] = []
    for engine in ENGINES.values():
        if engine is DEFAULT:
            continue
        fraction = None if has_step or cli_desired.mem_fraction_static is not None else s.get(engine.fraction_key)
        prefill = s.get(engine.prefill_key) if cli_desired.chunked_prefill_size is None else None
        if fraction is not None or prefill is not None:
            named.append((engine.name, None if fraction is None else Decimal(str(fraction)),
                          None if prefill is None else int(prefill)))  # fmt: skip
    if named:
        kwargs["for_engine"] = tuple(named)
    desired = DesiredState(**kwargs)
    validate_desired(desired)
    return desired


def desired_for(entry: HostEntry, cli_desired: DesiredArgs) -> DesiredState:
    return desired_state(cli_desired, entry.settings)


def unit_options_for(
    entry: HostEntry,
    unit: str | None,
    *,
    desired: DesiredArgs | None = None,
    target_tokens: int | None = None,
    timeout: float = 900.0,
    lock_timeout: int | None = None,
    smi_timeout: int | None = None,
    dry_run: bool = False,
    all_instances: bool = False,
) -> RunOptions:
    """A command's options on one host: command line > inventory host vars > built-in. The inventory's desired
    state is there for every command (`status` tells whether a unit is remediated against it)."""
    s = entry.settings
    return RunOptions(
        desired=desired_for(entry, desired or DesiredArgs()),
        unit=unit or s.get("unit"),
        target_tokens=target_tokens if target_tokens is not None else s.get("target_tokens"),
        timeout=timeout,
        dry_run=dry_run,
        server_port=s.get("server_port"),
        all_instances=all_instances,
        lock_wait=lock_timeout if lock_timeout is not None else LOCK_WAIT_S,
        smi_timeout=smi_timeout if smi_timeout is not None else SMI_TIMEOUT_S,
    )


def run_options_for(entry: HostEntry, request: OomRequest) -> RunOptions:
    """`oom`'s options on one host (its own: tokens, probe, rollback, force)."""
    s = entry.settings
    common = unit_options_for(
        entry,
        request.unit,
        desired=request.desired,
        target_tokens=request.target_tokens,
        timeout=request.timeout,
        lock_timeout=request.lock_timeout,
        smi_timeout=request.smi_timeout,
        dry_run=request.dry_run,
        all_instances=request.all_instances,
    )
    return replace(
        common,
        min_tokens=request.min_tokens if request.min_tokens is not None else s.get("min_tokens"),
        rollback=request.rollback,
        force=request.force,
        probe_tokens=request.probe_tokens if request.probe_tokens is not None else s.get("probe_tokens"),
    )
