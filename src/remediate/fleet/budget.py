"""The fleet side of the budget: the calibration log on this machine, `oom --auto` options, the `plan` job.

The log (``$XDG_STATE_HOME/remediate/observations.jsonl``) holds one JSON line per healthy start: `oom`
and `rollback` append to it when a host ends healthy; `plan` and `oom --auto` read it. Appends from
parallel hosts are serialised by a lock and go out as one ``write`` of one line each.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from remediate.core.budget.observation import Observation, parse_observations
from remediate.errors import ConfigError, RemediateError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest
from remediate.fleet.settings import run_options_for
from remediate.host.observe import observe
from remediate.host.options import BudgetOptions, RunOptions
from remediate.host.plan import plan_host
from remediate.host.restore import rollback_host
from remediate.host.runner import remediate_host
from remediate.models import HostResult, ProgressFn
from remediate.transport.base import Transport

ENV = "REMEDIATE_OBSERVATIONS"
FILENAME = "observations.jsonl"
_LOCK = threading.Lock()


def default_path(env: Mapping[str, str]) -> Path:
    """``$REMEDIATE_OBSERVATIONS``, else ``$XDG_STATE_HOME/remediate/observations.jsonl`` (``~/.local/state``)."""
    if env.get(ENV):
        return Path(env[ENV]).expanduser()
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state).expanduser() / "remediate" / FILENAME


def read_observations(path: Path) -> tuple[Observation, ...]:
    """Every well-formed record; a missing file is none, an unreadable one is bad input."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise ConfigError(f"cannot read the observations file: {exc.strerror or exc}", source=str(path)) from None
    return tuple(parse_observations(text.splitlines()))


def append_observation(path: Path, observation: Observation) -> None:
    """Append one record (the directory is created private to the user). Raises OSError."""
    line = (observation.to_json() + "\n").encode("utf-8")
    with _LOCK:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def log_path(path: str | None) -> Path:
    """The calibration log: the path given, else ``$REMEDIATE_OBSERVATIONS`` or the XDG state directory."""
    return Path(path).expanduser() if path else default_path(os.environ)


def observing(
    job: Callable[[Transport, HostEntry], HostResult], command: str, log: Path
) -> Callable[[Transport, HostEntry], HostResult]:
    """After a host ends healthy, read what its server measured and append it to the calibration log."""

    def run(transport: Transport, entry: HostEntry) -> HostResult:
        result = job(transport, entry)
        if not result.ok or result.extra.get("dry_run"):
            return result
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            record = observe(transport, result, command=command, at=at)
            if record is not None:
                append_observation(log, record)
                result.extra["observation"] = str(log)
        except (RemediateError, OSError) as exc:
            result.warnings.append(f"the observation was not recorded in {log}: {exc}")
        return result

    return run


def with_auto(per_host: dict[str, RunOptions], request: OomRequest, log: Path) -> dict[str, RunOptions]:
    """`oom --auto`: every host plans from its own evidence, with this machine's observations."""
    if request.allow_raise and not request.auto:
        raise ConfigError("--allow-raise only changes what --auto may choose: add --auto, or drop --allow-raise")
    if not request.auto:
        return per_host
    if request.cli_desired.get("mem_fraction_static") is not None or request.cli_desired.get("mem_fraction_step"):
        raise ConfigError("--auto chooses the fraction: drop --mem-fraction-static/--mem-fraction-step")
    records = read_observations(log)
    return {
        name: replace(
            options,
            auto=BudgetOptions(
                target_tokens=options.target_tokens,
                chunked_prefill_size=options.desired.chunked_prefill_size,
                chunk_is_ceiling=options.desired.chunk_is_ceiling,
                margin=request.margin,
                observations=records,
                allow_raise=request.allow_raise,
            ),
        )
        for name, options in per_host.items()
    }


def plan_job(
    *,
    unit: str | None = None,
    target_tokens: int | None = None,
    chunked_prefill_size: int | None = None,
    margin: float = 0.10,
    observations: str | None = None,
) -> Callable[[Transport, HostEntry], HostResult]:
    """The read-only `plan` of one host (inventory host vars give the unit, port and target)."""
    if not 0 <= margin < 10:
        raise ConfigError(f"--margin {margin} must be between 0 and 10 (a share: 0.10 = 10%)")
    records = read_observations(log_path(observations))

    def one(transport: Transport, entry: HostEntry) -> HostResult:
        options = run_options_for(entry, OomRequest(unit=unit, target_tokens=target_tokens))
        budget = BudgetOptions(
            target_tokens=options.target_tokens,
            chunked_prefill_size=chunked_prefill_size,
            chunk_is_ceiling=chunked_prefill_size is None,
            margin=margin,
            observations=records,
        )
        return plan_host(transport, options, budget, label=entry.name)

    return one


Job = Callable[[Transport, HostEntry], HostResult]


def oom_job(request: OomRequest, per_host: dict[str, RunOptions], progress: ProgressFn | None) -> Job:
    """`oom` on one host: with ``--auto`` each host plans from its own evidence; a healthy end is recorded."""
    log = log_path(request.observations)
    options = with_auto(per_host, request, log)
    return observing(lambda t, e: remediate_host(t, options[e.name], label=e.name, progress=progress), "oom", log)


def rollback_job(options: dict[str, RunOptions], to: str, progress: ProgressFn | None) -> Job:
    """`rollback` on one host; a healthy end is recorded in the calibration log."""
    job: Job = lambda t, e: rollback_host(t, options[e.name], to=to, label=e.name, progress=progress)  # noqa: E731
    return observing(job, "rollback", log_path(None))
