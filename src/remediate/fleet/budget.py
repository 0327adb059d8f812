"""The fleet side of the budget: `oom --auto` options, the `plan` job, recording healthy starts in the
calibration log (controller/observations.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from remediate.controller.observations import append_observation, log_path, read_observations
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
