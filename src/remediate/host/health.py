"""Waiting for an sglang server to come back: poll through the host's SSH connection.

Connection refused is normal for minutes while weights load; ``/health`` then answers 503 until the
warm-up request succeeds, then 200. Healthy means ``/health`` 200 *and* a ``max_total_num_tokens``
(from ``/server_info`` on sglang ≥ 0.5.6, ``/get_server_info`` before, or the journal's capacity
line). The unit's state is read alongside (often at first, then every few seconds) so a crash fails fast
instead of timing out.

The server's answers are not trusted: each GET is bounded in time and size (transport/http1.py), a JSON
document in depth (core/jsondoc.py); a bad answer is a failed poll. An answer counts only when the socket
it came through is held by the unit's processes (host/listener.py): a squatter on the port is reported
and waited past, never taken for the new server.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception_type, stop_before_delay

from remediate.core.diagnosis.explain import explain_crash
from remediate.core.diagnosis.systemd import gave_up_restarting
from remediate.core.jsondoc import DocumentError, parse_document
from remediate.core.probe import ServiceState, parse_show
from remediate.core.startup import parse_capacity_line, tokens_from_info
from remediate.core.unitfile.report import mask_secrets
from remediate.errors import ConnectionLost, RemediateError, StateUnknownError, TransportError, UnhealthyError
from remediate.host.listener import listener_owner
from remediate.transport.base import Transport

_STATE_PROPS = "ActiveState,SubState,Result,NRestarts,MainPID,InvocationID"
COMMAND_TIMEOUT_S = 30.0  # each systemctl/journalctl round trip of the wait


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


def journal_since(transport: Transport, unit: str, since_epoch: float | None, lines: int = 400) -> list[str]:
    """Journal lines of the unit since an epoch (or the last ``lines``), secrets masked."""
    since = f" --since @{int(since_epoch)}" if since_epoch else ""
    result = transport.run(
        f"journalctl -u {shlex.quote(unit)} -o cat --no-pager -n {lines}{since} 2>/dev/null", timeout=COMMAND_TIMEOUT_S
    )
    return [mask_secrets(line) for line in result.stdout.splitlines() if line.strip()]


def read_state(transport: Transport, unit: str, *, newest_line: bool = True) -> tuple[ServiceState, str]:
    """One round trip: the unit's state and (for the progress line) its newest journal line."""
    quoted = shlex.quote(unit)
    journal = f"journalctl -u {quoted} -o cat --no-pager -n 1 2>/dev/null" if newest_line else "true"
    result = transport.run(
        f"systemctl show {quoted} -p {_STATE_PROPS} 2>/dev/null; echo @@journal; {journal}", timeout=COMMAND_TIMEOUT_S
    )
    show, _, tail = result.stdout.partition("@@journal\n")
    return ServiceState(unit=unit, properties=parse_show(show)), mask_secrets(tail.strip())


def fetch_server_info(transport: Transport, host: str, port: int) -> tuple[dict[str, Any] | None, str]:
    """The server's info document: ``/server_info`` (sglang ≥ 0.5.6), else ``/get_server_info``."""
    return fetch_json(transport, host, port, "/server_info", "/get_server_info")


def fetch_json(transport: Transport, host: str, port: int, *paths: str) -> tuple[dict[str, Any] | None, str]:
    """The first of ``paths`` that answers 200 with a JSON object, and which one it was (else None, "")."""
    for path in paths:
        response = transport.http_get(host, port, path)
        if response.status == 200:
            try:
                data = parse_document(response.body)
            except DocumentError:
                continue  # bad JSON, or nested past the depth bound: a bad answer, not a crash of the tool
            if isinstance(data, dict):
                return data, path
    return None, ""


def fetch_tokens(transport: Transport, host: str, port: int) -> tuple[int | None, str]:
    """``max_total_num_tokens`` from the server's info endpoint (new name first, then the old one)."""
    info, path = fetch_server_info(transport, host, port)
    if info is None:
        return None, ""
    return tokens_from_info(info), path


FIRST_GAP_S = 0.02  # the first poll comes right after the restart returns; then the gaps grow ×1.3 …
GAP_GROWTH = 1.3  # (a server that is up in 0.3 s is seen at once; 1 s gaps are reached after ~3 s)
MAX_GAP_S = 1.0  # … to at most 1 s: a server that answers is noticed within a second
STATE_EVERY_S = 5.0  # while the port stays closed, `systemctl show` runs every 0.5 s at first, at most every 5 s


def _gap(attempt: int, max_gap: float) -> float:
    """The pause after poll ``attempt`` (1-based): capped exponential backoff."""
    return min(max_gap, FIRST_GAP_S * GAP_GROWTH ** (attempt - 1))


def _state_due(since_last: float, waited: float) -> bool:
    """Whether this poll also reads the unit's state: often at first (a crash fails the wait fast), then
    every few seconds (minutes of loading must not keep systemctl and journalctl busy on the host)."""
    return since_last >= min(STATE_EVERY_S, 0.5 + waited / 10)


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
) -> Healthy:
    """Poll until healthy; raise UnhealthyError on failure, crash loop, or timeout.

    Every poll is a ``/health`` GET through the connection (a direct-tcpip channel: no process on the host);
    the unit's state (``systemctl show`` + the newest journal line, one command) is read on the first poll
    and then on a schedule that thins out while the server loads (:func:`_state_due`), and once more when it
    answers unless a read under a second old saw the unit active with our InvocationID and a MainPID, so a
    crash, a systemd restart or another server on the port is never taken for the new server.
    ``initial_state``: the unit's state read right after the restart (the commit script's): it is the first
    state read, so the wait begins with a /health poll."""
    host, port = endpoint
    start = time.monotonic()
    baseline: dict[str, int] = {}
    polls = 0
    waited = 0.0  # the pauses so far (monotonic in production, and in tests whose sleeps are recorded)
    state_read_at: float | None = None  # ``waited`` at the last state read
    ours_at: float | None = None  # monotonic time of the last state read that showed our server running
    newest = ""

    def fail(message: str) -> UnhealthyError:
        try:
            lines = journal_since(transport, unit, restart_epoch)
        except TransportError:
            lines = []  # the verdict stands without the journal
        journal = explain_crash(lines)
        # systemd 252 keeps the first crash's Result (exit-code, signal) and shows start-limit-hit only after a
        # clean exit: the journal's "Start request repeated too quickly" is what tells a crash loop from a crash.
        if gave_up_restarting(journal):
            message += ": the server crash-looped until systemd's start limit (StartLimitBurst) stopped restarting it"
        return UnhealthyError(transport.host, message, journal=journal)

    def check_state(elapsed: float, *, newest_line: bool = True) -> None:
        nonlocal newest
        state, newest = read_state(transport, unit, newest_line=newest_line)
        judge(state, elapsed)

    def judge(state: ServiceState, elapsed: float) -> None:
        nonlocal state_read_at, ours_at
        state_read_at = waited
        ours_at = None
        if state.active_state == "failed":
            raise fail(f"{unit} failed (Result={state.result}) while waiting for the server")
        # With Restart=on-failure a crash shows as `activating (auto-restart)`, not `failed`, and
        # NRestarts only grows after RestartSec (10 s in the incident's unit). A restart we asked for
        # never passes through auto-restart, so seeing it means the new server's process died.
        if state.get("SubState") == "auto-restart":
            raise fail(f"{unit} crashed while loading (Result={state.result}); systemd is about to restart it")
        if invocation_id and state.invocation_id and state.invocation_id != invocation_id:
            raise fail(f"{unit} was restarted by systemd while loading (crash): new InvocationID")
        if "restarts" not in baseline:
            baseline["restarts"] = state.n_restarts
        elif state.n_restarts > baseline["restarts"]:
            raise fail(f"{unit} crashed and was restarted (NRestarts {baseline['restarts']} → {state.n_restarts})")
        if state.main_pid:
            if "pid" not in baseline:
                baseline["pid"] = state.main_pid
            elif state.main_pid != baseline["pid"]:
                raise fail(f"{unit} MainPID changed {baseline['pid']} → {state.main_pid} (crash)")
        if state.active_state in ("inactive", "deactivating") and elapsed > 1.0:
            raise fail(f"{unit} is {state.active_state} ({state.get('SubState')}) while waiting for the server")
        if state.active_state == "active" and state.main_pid and (not invocation_id or state.invocation_id):
            ours_at = time.monotonic()

    if initial_state is not None and initial_state.properties:
        judge(initial_state, 0.0)

    def attempt() -> Healthy:
        try:
            return poll_once()
        except ConnectionLost as cut:
            # The server keeps loading whatever the connection does: reconnect (within what is left of
            # --timeout) and keep waiting; the baselines (NRestarts, MainPID, InvocationID) still hold.
            left = timeout - (time.monotonic() - start)
            try:
                transport.reconnect(max(left, 1.0))
            except RemediateError as exc:
                raise StateUnknownError(
                    transport.host,
                    f"the connection was lost while waiting for the server ({cut.message}) and could not be "
                    f"re-established ({getattr(exc, 'message', exc)}): the new unit is written and {unit} was "
                    "restarted; whether the server came up is unknown. Re-running `remediate oom` is safe "
                    "(it reads what the host holds; `remediate status` shows it)",
                ) from exc
            raise _NotReady(f"reconnected after a lost connection ({cut.message})") from None

    def poll_once() -> Healthy:
        nonlocal polls
        polls += 1
        elapsed = time.monotonic() - start
        health = transport.http_get(host, port, "/health")
        if health.status is None:
            # A refused port is the loading server; anything else (a timeout, no route) is named as it is.
            refused = not health.error or any(w in health.error.lower() for w in ("connect failed", "refused"))
            phase = "loading (port closed)" if refused else f"loading (no answer on {host}:{port}: {health.error})"
        elif health.status != 200:
            phase = f"warming up (/health {health.status})"
        else:
            info, source = fetch_server_info(transport, host, port)
            tokens = tokens_from_info(info) if info is not None else None
            if tokens is None:
                tokens = parse_capacity_line(journal_since(transport, unit, restart_epoch))
                source = "journal"
            owner = listener_owner(transport, unit, endpoint) if tokens is not None else None
            if owner is not None and not owner.is_ours:
                phase = f"/health answers, but {owner.why}"
            elif tokens is not None:
                # The unit we restarted answers, not a crash loop or another server: unless a look under a
                # second ago saw it running (same InvocationID, MainPID set), look once more (no journal line).
                if ours_at is None or time.monotonic() - ours_at > max_backoff:
                    check_state(elapsed, newest_line=False)
                skipped = owner.why if owner is not None and owner.why.endswith("not checked") else None
                return Healthy(
                    tokens=tokens,
                    source=source,
                    info=info,
                    seconds=time.monotonic() - start,
                    polls=polls,
                    unchecked=skipped,
                )
            else:
                phase = "healthy, waiting for max_total_num_tokens"
        if state_read_at is None or _state_due(waited - state_read_at, waited):
            check_state(elapsed)
        if on_progress:
            on_progress(phase, elapsed, newest)
        raise _NotReady(phase)

    def pause(retry_state: RetryCallState) -> float:
        nonlocal waited
        gap = _gap(retry_state.attempt_number, max_backoff)
        waited += gap
        return gap

    retrying = Retrying(
        retry=retry_if_exception_type(_NotReady),
        wait=pause,
        stop=stop_before_delay(timeout),
        reraise=False,
    )
    try:
        result: Healthy = retrying(attempt)
        return result
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise fail(f"server not healthy after {timeout:.0f}s (last: {last})") from None
