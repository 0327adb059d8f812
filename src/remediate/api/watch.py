"""The API of `remediate watch`: the loop over the selected hosts, and the state's switches (status,
approve, deny, pause, resume) that another process may use while the watcher runs."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from remediate.api.hosts import TransportFactory, transports
from remediate.controller.state import ensure_dir, state_dir
from remediate.controller.watch_audit import read_audit
from remediate.controller.watch_state import WatchState, database_errors, open_state
from remediate.core.units import single_unit
from remediate.core.watch.policy import Policy
from remediate.core.watch.status import HostRows, host_status
from remediate.errors import ConfigError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest, RollbackRequest, WatchRequest
from remediate.fleet.settings import resolve_hosts, ssh_for, unit_options_for
from remediate.fleet.watch.clock import SteadyClock
from remediate.fleet.watch.eda import DecisionContext
from remediate.fleet.watch.loop import Watcher
from remediate.fleet.watch.policy_file import load_policy
from remediate.fleet.watch.sdnotify import Heartbeat, sd_notify
from remediate.fleet.watch.webhook import DEADLINE_S, WebhookQueue, audit_dropped, check_url
from remediate.models import HostResult
from remediate.transport.base import Transport

__all__ = ["WatchRequest", "answer", "sd_notify", "set_breaker", "set_paused", "watch", "watch_status"]


def _state(directory: str | None) -> WatchState:
    return open_state(ensure_dir(Path(directory) if directory else state_dir()))


def watch(
    request: WatchRequest,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] | None = None,
    notify: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[Watcher], None] | None = None,
    on_ready: Callable[[], None] | None = None,
    transport_factory: TransportFactory | None = None,
    warn: Callable[[str], None] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Watch until ``should_stop()`` (or one round with ``once``); bad input fails before any host is read.
    The rounds' clock (``clock``, default :class:`SteadyClock`) never goes back: the wall time at the start
    plus the monotonic time since, so a step of the system clock moves no cooldown, cap or breaker window.
    ``warn``: one line for a person per host left unwatched (no engine unit found, the named one missing).
    ``on_event``: every audit record as it is written (the terminal's one line per event).
    ``on_ready`` is called once the watcher can serve (its state claimed, its policy valid), before any host
    is read; under systemd's watchdog (WATCHDOG_USEC) a heartbeat thread pings while the loop makes progress
    (fleet/watch/sdnotify.py says why)."""
    clock = clock or SteadyClock()
    policy = load_policy(request.policy)
    if request.lookback_s is not None:
        policy = replace(policy, lookback_s=request.lookback_s)
    if request.healthy_period_s is not None:
        policy = replace(policy, healthy_period_s=request.healthy_period_s)
    webhook = check_url(request.webhook) if request.webhook else None
    _, hosts = resolve_hosts(request.targets, request.inventory)
    unit = single_unit(request.unit, "watch")
    hosts = [replace(h, settings={**h.settings, "unit": _one_unit(h, unit)}) for h in hosts]
    state = _state(request.state_dir)
    state.claim()
    queue = None
    if notify is None and webhook is not None:  # posts off the loop: a webhook that stays down never holds it
        queue = WebhookQueue(webhook, on_drop=lambda event, n: audit_dropped(state.directory, webhook, event, n))
        notify = queue.put
    metrics = None
    if request.metrics_listen:
        from remediate.fleet.watch.metrics import WatchMetrics

        metrics = WatchMetrics()
        metrics.listen(request.metrics_listen)
    factory = transports(transport_factory)
    context = DecisionContext()  # each decision notified with its diagnosis: the detector for EDA
    heartbeat = Heartbeat.from_env()
    alive = heartbeat.alive if heartbeat is not None else lambda: None
    watcher = Watcher(
        hosts,
        # One connect attempt per poll: the watcher's own backoff (2 s doubling, capped) retries a dead host,
        # and a poll's retries would hold the round (the fix's connections keep --connect-attempts).
        lambda entry: factory(entry, replace(ssh_for(entry, request.ssh), connect_attempts=1)),
        context.diagnose(_diagnose(request, alive)),
        _fix(request, policy, transport_factory),
        state,
        policy,
        dry_run=request.dry_run,
        notify=None if notify is None else context.notify(notify),
        metrics=metrics,
        undo=_undo(request, transport_factory),
        follow=request.follow and not request.once,
        warn=warn,
        on_event=on_event,
        alive=alive,
        confirm=_confirm,
        end_lingering=_end_lingering,
    )
    if on_ready is not None:
        on_ready()
    if heartbeat is not None:
        heartbeat.start()
    rounds = 0
    try:
        while True:
            watcher.round(clock())
            rounds += 1
            states = watcher.host_states()
            # systemctl status shows it; a bench counts the rounds by it (sd_notify(3) STATUS=).
            sd_notify(f"STATUS=round {rounds}: {sum(s == 'healthy' for s in states.values())}/{len(states)} healthy")
            if on_round is not None:
                on_round(watcher)
            if request.once:
                watcher.drain(clock, request.wait_timeout)
                return 0
            if should_stop():
                return 0
            pause = request.interval_s * random.uniform(0.8, 1.2)  # noqa: S311 - jitter, not a secret
            until = time.monotonic() + pause
            # The pause in steps of a second at most: should_stop seen, the loop marked alive, each second; a
            # followed host's journal cuts it short.
            while not should_stop() and (left := until - time.monotonic()) > 0:
                watcher.alive()
                if watcher.follow:
                    if watcher.wait(min(left, 1)):
                        break
                else:
                    sleep(min(left, 1))
            if should_stop():
                return 0
    finally:
        watcher.close(wait_s=request.wait_timeout)  # a fix running in parallel ends (bounded) and is recorded
        if queue is not None:
            queue.close(grace_s=DEADLINE_S)  # the last outcome's post gets its deadline, no more
        state.close()
        if heartbeat is not None:
            heartbeat.stop()


def _diagnose(request: WatchRequest, alive: Callable[[], None]) -> Callable[[Transport, HostEntry], HostResult]:
    def one(transport: Transport, entry: HostEntry) -> HostResult:
        from remediate.host.diagnose.diagnose import diagnose_host

        alive()  # one step of the round, bounded (fleet/watch/sdnotify.py): several crashed hosts, one after another

        return diagnose_host(transport, unit_options_for(entry, request.unit), label=entry.name)

    return one


def _confirm(transport: Transport, entry: HostEntry, unit: str) -> str | None:
    """A fatal line confirmed by the server's health endpoint silent (host/watch/poll.py), else None."""
    from remediate.host.watch.poll import server_silent

    port = entry.settings.get("server_port")
    return server_silent(transport, unit, int(port) if port else None)


def _end_lingering(transport: Transport, unit: str, invocation: str) -> str:
    from remediate.host.watch.poll import end_lingering

    return end_lingering(transport, unit, invocation)


def _fix(request: WatchRequest, policy: Policy, factory: TransportFactory | None) -> Callable[[HostEntry], HostResult]:
    def one(entry: HostEntry) -> HostResult:
        from remediate.api.oom import remediate_oom

        # The host as it was polled (its address, its ssh settings, the unit watched in its ``unit``): never
        # its name resolved again (a re-addressed inventory, a host named `all` or like a group or a glob).
        oom = OomRequest(
            targets=(entry.name,),
            hosts=(entry,),
            inventory=request.inventory,
            ssh=request.ssh,
            timeout=request.wait_timeout,
            auto=policy.how == "auto",
            allow_raise=False,  # the watcher never raises a fraction
        )
        return remediate_oom(oom, transport_factory=factory).results[0]

    return one


def _undo(request: WatchRequest, factory: TransportFactory | None) -> Callable[[HostEntry, str], HostResult]:
    def one(entry: HostEntry, backup: str) -> HostResult:
        from remediate.api.rollback_cmd import rollback

        undo = RollbackRequest(
            targets=(entry.name,),
            hosts=(entry,),
            inventory=request.inventory,
            ssh=request.ssh,
            to=backup,
            timeout=request.wait_timeout,
        )
        return rollback(undo, transport_factory=factory).results[0]

    return one


def watch_status(
    directory: str | None = None, *, incidents: int = 10, policy: str | None = None, now: float | None = None
) -> dict[str, Any]:
    """What an on-call reads first: the breaker, the pause, pending approvals, the last incidents and events,
    and ``watched``: every watched host (healthy ones too) with its last crash, its last fix, when the next
    automatic fix is allowed (``policy``: the watcher's policy file, for its cooldown and cap) and its open
    incidents and approvals, each with its age at ``now``.
    What cannot be read is said, and the rest still shown: ``problems`` holds one line per unreadable file (a
    corrupt ``watch.db``: the hosts still come from the audit log; audit lines that do not parse: counted)."""
    rails = load_policy(policy)
    now = time.time() if now is None else now
    folder = ensure_dir(Path(directory) if directory else state_dir())
    audit = read_audit(folder)
    hosts: dict[str, str] = {}
    no_unit: dict[str, str] = {}
    for event in audit.events:
        host = event.get("host")
        if isinstance(host, str):
            hosts[host] = _host_state(event, hosts.get(host, "healthy"))
            if event.get("event") == "no_unit":
                no_unit[host] = str(event.get("reason"))
            elif event.get("event") == "units_found":
                no_unit.pop(host, None)
    problems = []
    if audit.skipped:
        problems.append(f"{audit.path}: {audit.skipped} line(s) not an event, skipped (a cut or edited line)")
    doc: dict[str, Any] = {
        "no_unit": no_unit,
        "breaker": None,
        "paused": None,
        "pending_approvals": [],
        "incidents": [],
        "hosts": hosts,
        "now": now,
        "watched": [],
    }
    try:
        state = open_state(folder)
        try:
            with database_errors(folder):
                doc.update(
                    breaker=state.breaker_reason(),
                    paused=state.is_paused(),
                    pending_approvals=[{"id": a, "incident": i, "host": h} for a, i, h in state.pending()],
                    incidents=state.incidents(incidents),
                    watched=_watched(state, audit.events, hosts, rails, now),
                )
        finally:
            state.close()
    except ConfigError as exc:
        problems.append(str(exc))
    if problems:
        doc["problems"] = problems
    return doc


def _watched(
    state: WatchState, events: list[dict[str, Any]], states: dict[str, str], policy: Policy, now: float
) -> list[dict[str, Any]]:
    """Every host a watcher polled or wrote of, healthy ones too (core/watch/status.py), by name."""
    units: dict[str, list[str]] = {}
    for host, unit in state.watched():
        units.setdefault(host, [])
        if unit and unit not in units[host]:
            units[host].append(unit)
    for host in states:
        units.setdefault(host, [])
    opened = state.open_incidents()
    waiting = state.pending_approvals()
    out = []
    for host in sorted(units):
        rows = HostRows(
            state.history(host),
            tuple(i for i in opened if i["host"] == host),
            tuple(a for a in waiting if a["host"] == host),
        )
        out.append(host_status(host, tuple(units[host]), states.get(host, "healthy"), events, rows, policy, now))
    return out


def _host_state(event: dict[str, Any], before: str) -> str:
    kind = event.get("event")
    if kind == "no_unit":
        return "no_unit"
    if kind == "units_found":
        return "healthy" if before == "no_unit" else before
    if kind == "detected":
        return "crashed"
    if kind == "unreachable":
        return "unreachable"
    if kind == "decided" and event.get("verdict") == "needs_human":
        return "needs_human"
    if kind in ("acted", "recovered"):
        return "remediating"
    if kind == "outcome":
        return "cooling_down" if event.get("outcome") == "remediated" else "crashed"
    return before


def answer(approval_id: str, *, approve: bool, who: str, directory: str | None = None) -> None:
    """``approve``/``deny``; ConfigError when it is not pending (or expired: the policy's ``approval_ttl``)."""
    state = _state(directory)
    try:
        with database_errors(state.directory):
            state.answer(approval_id, approve=approve, who=who, now=time.time())
    finally:
        state.close()


def set_paused(is_paused: bool, directory: str | None = None) -> None:
    state = _state(directory)
    try:
        with database_errors(state.directory):
            state.set_paused(is_paused)
    finally:
        state.close()


def set_breaker(reason: str | None, directory: str | None = None) -> None:
    """``None`` re-arms the breaker (``--resume``): only a person closes it."""
    state = _state(directory)
    try:
        with database_errors(state.directory):
            if reason is None:
                state.reset_breaker()
            else:
                state.trip_breaker(reason)
    finally:
        state.close()


def _one_unit(host: HostEntry, given: str | None) -> str | None:
    """The one unit the watcher follows on ``host`` (None: none named, the host's engine units are found at
    its first connection): an inventory's ``unit:`` glob or list is bad input there too, named with its host."""
    from remediate.errors import ConfigError

    unit = unit_options_for(host, given).unit
    try:
        return single_unit(unit, "watch")
    except ConfigError:
        where = "--unit" if given is not None else "the inventory's unit"
        message = f"{where} {unit!r}: `remediate watch` follows one unit per host: name it exactly"
        raise ConfigError(message, source=host.name) from None
