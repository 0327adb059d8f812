"""Rolling a per-host job over a fleet: canary, batches, forks, failure budget, Ctrl-C.

Semantics (documented in docs/FLEET.md):
- the canary batch runs first; any failure there stops the rollout;
- then batches sized like Ansible's ``serial`` (``N``, ``P%`` of all selected hosts, or a list whose
  last element repeats; never below 1); each batch finishes before the next starts;
- at most ``forks`` hosts are worked on at once;
- ``max_failures`` (``N`` or ``P%`` of all hosts, default 0) counts failed, rolled-back and unreachable
  hosts over the whole rollout; once it is *exceeded* no new host starts, in-flight hosts finish
  (rolling back per their own policy), and the rest are ``not_attempted``;
- Ctrl-C: no new hosts start; in-flight ones finish; the report still prints; a second Ctrl-C stops the
  waiting (those hosts are reported in flight, state unknown), every result already in is kept;
- a ``confirm``, ``on_event`` or ``stop_when`` callback that raises halts the rollout like a failure budget:
  in-flight hosts finish, every result is kept;
- a worker that raises something that is not a RemediateError (a bug, or a library exception that escaped
  translation) fails only its host: ``internal error: <type>: <message>``, exit 70, counted as a failure;
  the other hosts' results and the retry file are kept, and the traceback goes to the log (the logger
  ``remediate.fleet.rollout`` and the state directory's ``internal-errors.log``), not to the terminal.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from remediate.controller.internal_errors import append_traceback
from remediate.core.unitfile.report import mask_secrets
from remediate.errors import EXIT_BUG, ConfigError
from remediate.models import HostResult

T = TypeVar("T")
_SPEC = re.compile(r"^\s*(\d+)\s*(%?)\s*$")

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())  # no traceback on the terminal unless the caller configures logging


@dataclass(frozen=True)
class Strategy:
    canary: int = 1
    batch: tuple[str, ...] = ("100%",)
    forks: int = 10
    max_failures: str = "0"
    pause_after_canary: bool = False


def parse_batch(spec: str | int | Sequence[str | int]) -> tuple[str, ...]:
    """``"1,10%,25%"``, ``5``, ``["1", "25%"]`` → validated tuple of elements."""
    items: list[str]
    if isinstance(spec, int):
        items = [str(spec)]
    elif isinstance(spec, str):
        items = [part for part in spec.split(",")]
    else:
        items = [str(part) for part in spec]
    if not items:
        raise ConfigError("--batch needs at least one size")
    for item in items:
        match = _SPEC.fullmatch(item)
        if not match or (not match.group(2) and int(match.group(1)) < 1) or int(match.group(1)) < 1:
            raise ConfigError(f"--batch {item!r}: expected a positive N or P% (e.g. 1,10%,25%)")
    return tuple(item.strip() for item in items)


def _size(item: str, total: int) -> int:
    match = _SPEC.fullmatch(item)
    assert match
    value = int(match.group(1))
    if match.group(2):
        return max(1, math.floor(total * value / 100))
    return max(1, value)


def plan_batches(total: int, strategy: Strategy) -> list[int]:
    """Batch sizes covering ``total`` hosts: the canary, then the serial list (its last element repeats)."""
    sizes: list[int] = []
    left = total
    if left and strategy.canary > 0:
        first = min(strategy.canary, left)
        sizes.append(first)
        left -= first
    i = 0
    while left > 0:
        item = strategy.batch[min(i, len(strategy.batch) - 1)]
        size = min(_size(item, total), left)
        sizes.append(size)
        left -= size
        i += 1
    return sizes


def failure_budget(spec: str | int, total: int) -> int:
    """How many failures are tolerated: ``N`` or ``P%`` of the hosts (rounded down)."""
    match = _SPEC.fullmatch(str(spec))
    if not match:
        raise ConfigError(f"--max-failures {spec!r}: expected N or P%")
    value = int(match.group(1))
    if match.group(2):
        if value > 100:
            raise ConfigError(f"--max-failures {spec!r}: a percentage is at most 100%")
        return math.floor(total * value / 100)
    return value


@dataclass
class Rollout(Generic[T]):
    """Runs ``work`` over ``hosts`` per a Strategy; collects one HostResult per host, in host order."""

    hosts: Sequence[T]
    name_of: Callable[[T], str]
    work: Callable[[T], HostResult]
    strategy: Strategy = field(default_factory=Strategy)
    confirm: Callable[[str], bool] | None = None
    on_event: Callable[[str], None] | None = None
    halted: str | None = None
    halt_code: int = 1  # the exit code of hosts not attempted: 2 when a canary refused bad input (nothing written)
    interrupted: bool = False
    batches: list[list[str]] = field(default_factory=list)
    stop_when: Callable[[HostResult], str | None] | None = None
    given_up: bool = False  # a second Ctrl-C: the in-flight hosts were not waited for

    def run(self) -> list[HostResult]:
        if self.strategy.forks < 1:
            raise ConfigError("--forks must be at least 1")
        total = len(self.hosts)
        budget = failure_budget(self.strategy.max_failures, total)
        sizes = plan_batches(total, self.strategy)
        results: dict[int, HostResult] = {}
        failures = 0
        stop = threading.Event()
        index = 0
        running: dict[Future[HostResult], int] = {}
        # One thread per host that can run at once (never more than the hosts): all of them handshake together.
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.strategy.forks, total)), thread_name_prefix="remediate")
        try:
            try:
                for number, size in enumerate(sizes):
                    if stop.is_set():
                        break
                    batch = list(range(index, index + size))
                    index += size
                    is_canary = number == 0 and self.strategy.canary > 0
                    self.batches.append([self.name_of(self.hosts[i]) for i in batch])
                    canary = " (canary)" if is_canary else ""
                    self._event(f"batch {number + 1}/{len(sizes)}{canary}: {len(batch)} host(s)")
                    pending = list(batch)
                    while pending or running:
                        while pending and len(running) < self.strategy.forks and not stop.is_set():
                            i = pending.pop(0)
                            running[pool.submit(self.work, self.hosts[i])] = i
                        if not running:
                            break
                        done, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
                        for future in done:
                            i = running.pop(future)
                            results[i] = result = self._collect(future, i)
                            if not result.ok:
                                failures += 1
                                if is_canary:
                                    if not stop.is_set() and all(r.exit_code == 2 for r in results.values()):
                                        self.halt_code = 2  # bad input refused, nothing written (a --probe typo)
                                    self._halt(stop, f"canary host {result.host} {result.outcome}")
                                elif failures > budget:
                                    limit = self.strategy.max_failures
                                    self._halt(stop, f"{failures} failure(s) exceed --max-failures {limit}")
                            if self.stop_when and not stop.is_set():
                                reason = self.stop_when(result)
                                if reason:
                                    self._halt(stop, reason)
                    if is_canary and not stop.is_set() and self.strategy.pause_after_canary and index < total:
                        if not self._confirmed(stop, "canary batch healthy; continue the rollout?"):
                            self._halt(stop, "stopped after the canary batch")
            except KeyboardInterrupt:
                # Ctrl-C anywhere in the loop: start nothing new, let in-flight hosts finish (or roll back).
                self.interrupted = True
                self._halt(stop, "interrupted (Ctrl-C): in-flight hosts finish, no new host starts")
                self._collect_all(running, results)
            except Exception as exc:  # noqa: BLE001 - a caller's callback (confirm, on_event, stop_when) raised
                self._halt(stop, f"a callback raised {type(exc).__name__}: {exc}", announce=False)
                self._collect_all(running, results)
        finally:
            # After a second Ctrl-C the in-flight hosts' threads are not waited for here: they end on their own.
            pool.shutdown(wait=not self.given_up, cancel_futures=True)
        out: list[HostResult] = []
        for i, host in enumerate(self.hosts):
            if i in results:
                out.append(results[i])
            else:
                out.append(
                    HostResult(
                        host=self.name_of(host),
                        outcome="not_attempted",
                        error=f"not attempted: {self.halted or 'rollout halted'}",
                        exit_code=self.halt_code,
                    )
                )
        return out

    def _collect(self, future: Future[HostResult], i: int) -> HostResult:
        """The host's result; an exception that escaped its worker becomes that host's failed result."""
        try:
            return future.result()
        except Exception as exc:  # noqa: BLE001 - a worker's bug must not lose the other hosts' results
            return internal_error(self.name_of(self.hosts[i]), exc)

    def _collect_all(self, running: dict[Future[HostResult], int], results: dict[int, HostResult]) -> None:
        """Every in-flight host's result, once it is done. A second Ctrl-C stops the waiting: the hosts still
        in flight are reported as such (their transactions go on, and record themselves, in the background);
        every result already in is kept."""
        try:
            for future, i in list(running.items()):
                results[i] = self._collect(future, i)
                del running[future]
        except KeyboardInterrupt:
            self.given_up = True
            for i in running.values():
                results[i] = HostResult(
                    host=self.name_of(self.hosts[i]),
                    outcome="failed",
                    error="interrupted twice (Ctrl-C) while this host was in flight: its state is unknown; it "
                    "finishes (or rolls back) on its own and records itself. `remediate status` shows it",
                    exit_code=1,
                )
        running.clear()

    def _confirmed(self, stop: threading.Event, question: str) -> bool:
        if self.confirm is None:
            return False
        try:
            return self.confirm(question)
        except Exception as exc:  # noqa: BLE001 - the caller's callback: the rollout stops, results kept
            self._halt(stop, f"the confirm callback raised {type(exc).__name__}: {exc}")
            return False

    def _halt(self, stop: threading.Event, reason: str, *, announce: bool = True) -> None:
        if not stop.is_set():
            self.halted = reason
            stop.set()
            if announce:
                self._event(f"halting: {reason}")

    def _event(self, text: str) -> None:
        if self.on_event:
            self.on_event(text)  # a raising on_event halts the rollout (run() keeps the results)


def internal_error(host: str, exc: BaseException, *, clock: Callable[[], float] = time.time) -> HostResult:
    """A failed HostResult for an exception that is not a RemediateError (a bug): the error names its type
    and message, exit 70; the traceback is logged and appended to the state directory's internal-errors.log."""
    text = mask_secrets("".join(traceback.format_exception(exc)))  # an exception's text may quote a unit or env
    log.error("%s: internal error (a bug)\n%s", host, text.rstrip())
    error = mask_secrets(f"internal error: {type(exc).__name__}: {exc}")
    where = append_traceback(host, text, clock)
    error += f" (a bug; the traceback is in {where})" if where else " (a bug)"
    now = clock()
    return HostResult(host=host, outcome="failed", error=error, exit_code=EXIT_BUG, started_at=now, finished_at=now)
