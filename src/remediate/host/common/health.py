"""Waiting for an sglang server to come back: poll through the host's SSH connection.

Connection refused is normal for minutes while weights load; ``/health`` then answers 503 until the
warm-up request succeeds, then 200. Healthy means ``/health`` 200 *and* a ``max_total_num_tokens``
(from ``/server_info`` on sglang ≥ 0.5.6, ``/get_server_info`` before, or the journal's capacity
line; vLLM's from its journal line, else its ``/metrics`` ``vllm:cache_config_info``). The unit's state is read
alongside (after a second, then every few seconds) so a crash fails fast instead of timing out.

The server's answers are not trusted: each GET is bounded in time and size (transport/http1.py), a JSON
document in depth (core/jsondoc.py); a bad answer is a failed poll. An answer counts only when the socket
it came through is held by the unit's processes (host/common/listener.py): a squatter on the port is reported
and waited past, never taken for the new server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception_type, stop_before_delay

from remediate.core.diagnosis.explain import explain_crash
from remediate.core.diagnosis.systemd import gave_up_restarting
from remediate.core.engines import SGLANG, Engine
from remediate.core.probe import ServiceState
from remediate.core.startup import tokens_from_info
from remediate.errors import ConnectionLost, RemediateError, StateUnknownError, TransportError, UnhealthyError
from remediate.host.common.environ import ServerEnv
from remediate.host.common.facts import fetch_json, fetch_metrics_tokens, journal_since, read_state
from remediate.host.common.listener import last_look
from remediate.transport.base import Transport


class _NotReady(Exception):
    """The server is still starting: keep polling."""


@dataclass(frozen=True)
class Healthy:
    tokens: int
    source: str
    info: dict[str, Any] | None
    seconds: float
    polls: int
    unchecked: str | None = None  # why the port's owner could not be checked (a container, no ss), else None
    env_read: bool = False  # the server's allocator variables were read with the last look (``environ=True``)
    env: ServerEnv | None = None  # … and what they were (None: no main process, nothing readable)


FIRST_GAP_S = 0.02  # the first poll comes right after the restart returns; then the gaps grow ×1.3 …
GAP_GROWTH = 1.3  # (a server that is up in 0.3 s is seen at once; 1 s gaps are reached after ~3 s)
MAX_GAP_S = 1.0  # … to at most 1 s: a server that answers is noticed within a second
FIRST_STATE_S = 1.0  # the commit's own read right after the restart is the first; the next comes a second later,
STATE_EVERY_S = 5.0  # then the gaps grow (1 s + a tenth of the wait so far) to at most 5 s while the server loads


def _gap(attempt: int, max_gap: float) -> float:
    """The pause after poll ``attempt`` (1-based): capped exponential backoff."""
    return min(max_gap, FIRST_GAP_S * GAP_GROWTH ** (attempt - 1))


def _state_due(since_last: float, waited: float) -> bool:
    """Whether this poll also reads the unit's state: a second after the last read at first (a crash fails the
    wait fast), then every few seconds (minutes of loading must not keep systemctl and journalctl busy on the
    host; a fleet's hosts share their cores with the servers that are starting)."""
    return since_last >= min(STATE_EVERY_S, FIRST_STATE_S + waited / 10)


@dataclass
class HealthWait:
    """One wait for a restarted server: what it has seen so far (the baselines, the last state read) as
    attributes, and one method per step of a poll. :func:`wait_healthy` is how callers use it."""

    transport: Transport
    unit: str
    endpoint: tuple[str, int]
    timeout: float
    restart_epoch: float | None
    invocation_id: str | None = None
    on_progress: Callable[[str, float, str], None] | None = None
    max_backoff: float = MAX_GAP_S
    engine: Engine = SGLANG  # its info documents and its capacity line (vLLM: the journal's GPU KV cache size)
    environ: bool = False  # read the server's allocator variables with the last look (verify checks them)
    sleep: Callable[[float], None] = time.sleep  # how the pauses are taken (tests record them instead)
    start: float = field(default_factory=time.monotonic, init=False)
    baseline_restarts: int | None = field(default=None, init=False)  # NRestarts at the first state read
    baseline_pid: int | None = field(default=None, init=False)  # the first MainPID seen
    polls: int = field(default=0, init=False)
    waited: float = field(default=0.0, init=False)  # the pauses so far (monotonic, or the tests' recorded naps)
    state_read_at: float | None = field(default=None, init=False)  # ``waited`` at the last state read
    ours_at: float | None = field(default=None, init=False)  # monotonic time of the last read showing our server
    newest: str = field(default="", init=False)  # the unit's newest journal line, for the progress line

    def run(self, initial_state: ServiceState | None = None) -> Healthy:
        """Poll until healthy (the gaps from :func:`_gap`, within ``timeout``); raise UnhealthyError otherwise."""
        if initial_state is not None and initial_state.properties:
            self.judge(initial_state, 0.0)
        retrying = Retrying(
            retry=retry_if_exception_type(_NotReady),
            wait=self.pause,
            stop=stop_before_delay(self.timeout),
            sleep=self.sleep,
            reraise=False,
        )
        try:
            result: Healthy = retrying(self.attempt)
            return result
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise self.fail(f"server not healthy after {self.timeout:.0f}s (last: {last})") from None

    def fail(self, message: str) -> UnhealthyError:
        """The verdict, with the journal since the restart (OOM lines first)."""
        try:
            lines = journal_since(self.transport, self.unit, self.restart_epoch)
        except TransportError:
            lines = []  # the verdict stands without the journal
        journal = explain_crash(lines)
        # systemd 252 keeps the first crash's Result (exit-code, signal) and shows start-limit-hit only after a
        # clean exit: the journal's "Start request repeated too quickly" is what tells a crash loop from a crash.
        if gave_up_restarting(journal):
            message += ": the server crash-looped until systemd's start limit (StartLimitBurst) stopped restarting it"
        return UnhealthyError(self.transport.host, message, journal=journal)

    def check_state(self, elapsed: float, *, newest_line: bool = True) -> None:
        """Read the unit's state (and its newest journal line, for a progress line) and judge it."""
        newest_line = newest_line and self.on_progress is not None
        state, self.newest = read_state(self.transport, self.unit, newest_line=newest_line)
        self.judge(state, elapsed)

    def judge(self, state: ServiceState, elapsed: float) -> None:
        """Fail fast on a failed unit, a crash, a restart by systemd or a new MainPID; note our server running."""
        unit = self.unit
        self.state_read_at = self.waited
        self.ours_at = None
        if state.active_state == "failed":
            raise self.fail(f"{unit} failed{_result(state)} while waiting for the server")
        # With Restart=on-failure a crash shows as `activating (auto-restart)`, not `failed`, and
        # NRestarts only grows after RestartSec (10 s in the incident's unit). A restart we asked for
        # never passes through auto-restart, so seeing it means the new server's process died.
        if state.get("SubState") == "auto-restart":
            raise self.fail(f"{unit} crashed while loading{_result(state)}; systemd is about to restart it")
        if self.invocation_id and state.invocation_id and state.invocation_id != self.invocation_id:
            raise self.fail(f"{unit} was restarted by systemd while loading (crash): new InvocationID")
        if self.baseline_restarts is None:
            self.baseline_restarts = state.n_restarts
        elif state.n_restarts > self.baseline_restarts:
            raise self.fail(
                f"{unit} crashed and was restarted (NRestarts {self.baseline_restarts} → {state.n_restarts})"
            )
        if state.main_pid:
            if self.baseline_pid is None:
                self.baseline_pid = state.main_pid
            elif state.main_pid != self.baseline_pid:
                raise self.fail(f"{unit} MainPID changed {self.baseline_pid} → {state.main_pid} (crash)")
        if state.active_state in ("inactive", "deactivating") and elapsed > 1.0:
            raise self.fail(f"{unit} is {state.active_state} ({state.get('SubState')}) while waiting for the server")
        if state.active_state == "active" and state.main_pid and (not self.invocation_id or state.invocation_id):
            self.ours_at = time.monotonic()

    def attempt(self) -> Healthy:
        """One poll; a lost connection is re-established and counts as not ready yet."""
        try:
            return self.poll_once()
        except ConnectionLost as cut:
            # The server keeps loading whatever the connection does: reconnect (within what is left of
            # --timeout) and keep waiting; the baselines (NRestarts, MainPID, InvocationID) still hold.
            left = self.timeout - (time.monotonic() - self.start)
            try:
                self.transport.reconnect(max(left, 1.0))
            except RemediateError as exc:
                raise StateUnknownError(
                    self.transport.host,
                    f"the connection was lost while waiting for the server ({cut.message}) and could not be "
                    f"re-established ({getattr(exc, 'message', exc)}): the new unit is written and {self.unit} was "
                    "restarted; whether the server came up is unknown. Re-running `remediate oom` is safe "
                    "(it reads what the host holds; `remediate status` shows it)",
                ) from exc
            raise _NotReady(f"reconnected after a lost connection ({cut.message})") from None

    def poll_once(self) -> Healthy:
        """``/health``, then (on 200) the capacity and the last look (the port's owner and the unit's state, in
        one round trip); the state when it is due."""
        transport, unit, endpoint = self.transport, self.unit, self.endpoint
        host, port = endpoint
        self.polls += 1
        elapsed = time.monotonic() - self.start
        health = transport.http_get(host, port, "/health")
        if health.status is None:
            # A refused port is the loading server; anything else (a timeout, no route) is named as it is.
            refused = not health.error or any(w in health.error.lower() for w in ("connect failed", "refused"))
            phase = "loading (port closed)" if refused else f"loading (no answer on {host}:{port}: {health.error})"
        elif health.status != 200:
            phase = f"warming up (/health {health.status})"
        else:
            engine = self.engine
            info, source = fetch_json(transport, host, port, *engine.info_paths) if engine.info_paths else (None, "")
            tokens = tokens_from_info(info) if info is not None else None
            if tokens is None:
                tokens = engine.capacity(journal_since(transport, unit, self.restart_epoch))
                source = "journal"
            if tokens is None and engine.metrics_info is not None:
                # the startup line gone (journald's rate limit, a rotated journal) or not read yet: the running
                # server's own Prometheus page (vLLM's vllm:cache_config_info)
                tokens = fetch_metrics_tokens(transport, host, port, engine)
                source = engine.metrics_path
            look = (
                last_look(transport, unit, endpoint, environ=self.environ, entry=self.engine.process_entry)
                if tokens is not None
                else None
            )
            if look is not None and look.state is not None:
                self.judge(look.state, elapsed)  # the look's own state: a crash, a restart, a new MainPID fail here
            owner = look.owner if look is not None else None
            if owner is not None and not owner.is_ours:
                phase = f"/health answers, but {owner.why}"
            elif look is not None and tokens is not None:
                # The unit we restarted answers, not a crash loop or another server. A look that did not bring
                # the state back: unless a read under a second ago saw it running (same InvocationID, MainPID
                # set), read it once more (no journal line).
                if look.state is None and (self.ours_at is None or time.monotonic() - self.ours_at > self.max_backoff):
                    self.check_state(elapsed, newest_line=False)
                skipped = look.owner.why if look.owner.why.endswith("not checked") else None
                return Healthy(
                    tokens=tokens,
                    source=source,
                    info=info,
                    seconds=time.monotonic() - self.start,
                    polls=self.polls,
                    unchecked=skipped,
                    env_read=look.environ,
                    env=look.env,
                )
            else:
                phase = f"healthy, waiting for {self.engine.capacity_name}"
        if self.state_read_at is None or _state_due(self.waited - self.state_read_at, self.waited):
            self.check_state(elapsed)
        if self.on_progress:
            self.on_progress(phase, elapsed, self.newest)
        raise _NotReady(phase)

    def pause(self, retry_state: RetryCallState) -> float:
        """The gap before the next poll, added to ``waited``."""
        gap = _gap(retry_state.attempt_number, self.max_backoff)
        self.waited += gap
        return gap


def wait_healthy(
    transport: Transport,
    unit: str,
    endpoint: tuple[str, int],
    *,
    timeout: float,
    restart_epoch: float | None,
    invocation_id: str | None = None,
    on_progress: Callable[[str, float, str], None] | None = None,
    max_backoff: float = MAX_GAP_S,
    initial_state: ServiceState | None = None,
    engine: Engine = SGLANG,
    environ: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> Healthy:
    """Poll until healthy; raise UnhealthyError on failure, crash loop, or timeout.

    Every poll is a ``/health`` GET through the connection (a direct-tcpip channel: no process on the host);
    the unit's state (``systemctl show``, with the newest journal line when there is a progress line to show
    it) is read on the first poll and then on a schedule that thins out while the server loads
    (:func:`_state_due`), and once more when it answers: the last look (host/common/listener.py) reads it with the
    port's owner in one round trip, so a crash, a systemd restart or another server on the port is never
    taken for the new server. ``initial_state``: the unit's state read right after the restart (the commit
    script's): it is the first state read, so the wait begins with a /health poll. ``environ``: the last look
    also reads the server's allocator variables (``Healthy.env``). ``sleep`` takes the pauses between polls."""
    wait = HealthWait(
        transport,
        unit,
        endpoint,
        timeout=timeout,
        restart_epoch=restart_epoch,
        invocation_id=invocation_id,
        on_progress=on_progress,
        max_backoff=max_backoff,
        engine=engine,
        environ=environ,
        sleep=sleep,
    )
    return wait.run(initial_state)


def _result(state: ServiceState) -> str:
    """`` (Result=…)`` for a message; nothing where the systemctl shows no Result= (a daemonless one)."""
    return f" (Result={state.result})" if state.result else ""
