"""`oom --auto` over a fleet: each host's run options get a budget that plans from the host's own evidence
and this machine's calibration log (controller/observations.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from remediate.controller.observations import read_observations
from remediate.errors import ConfigError
from remediate.fleet.request import OomRequest
from remediate.host.common.options import BudgetOptions, RunOptions


def with_auto(per_host: dict[str, RunOptions], request: OomRequest, log: Path) -> dict[str, RunOptions]:
    """`oom --auto`: every host plans from its own evidence, with this machine's observations."""
    if request.allow_raise and not request.auto:
        raise ConfigError("--allow-raise only changes what --auto may choose: add --auto, or drop --allow-raise")
    if not request.auto:
        return per_host
    if request.desired.mem_fraction_static is not None or request.desired.mem_fraction_step:
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
