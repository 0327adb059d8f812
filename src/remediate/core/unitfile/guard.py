"""PURE: where the unit itself says its sglang refuses expandable segments, so the recipe leaves the allocator alone.

sglang 0.5.23 refuses ``expandable_segments:True`` (in ``PYTORCH_CUDA_ALLOC_CONF`` or ``PYTORCH_ALLOC_CONF``) at
startup in two setups, so the recipe's ``expandable_segments:True`` would turn a working unit into a crash loop:

- Mooncake over EFA: disaggregation/mooncake/utils.py ``_validate_efa_allocator_compatibility`` raises a
  ValueError when ``envs.MOONCAKE_PROTOCOL.get().lower() == "efa"`` (environ.py: ``MOONCAKE_PROTOCOL``,
  default ``rdma``; no server flag sets it, server_args has none);
- the weight-cache daemon: weight_cache/daemon.py ``WeightCacheDaemon._assert_ipc_compatible_allocator`` raises a
  RuntimeError; the engine spawns the daemon, with its environment, for ``--weight-cache-mode daemon``
  (arg_groups/fields/model.py; entrypoints/engine.py ``_launch_weight_cache_daemons``). ``client`` loads over
  IPC from a daemon run elsewhere and ``off`` runs none: expandable segments stay fine there.
"""

from __future__ import annotations

from remediate.core.unitfile.alloc import ALLOC, alloc_target
from remediate.core.unitfile.argv import find_flags
from remediate.core.unitfile.sources import Service
from remediate.errors import ConfigError

EXPANDABLE_KEY = "expandable_segments"


def expandable_refused(service: Service) -> str | None:
    """Why this unit's sglang refuses expandable segments (one line naming where the unit says so), or None."""
    try:
        target = alloc_target(service, "MOONCAKE_PROTOCOL", notes=False)  # wrappers' -e/env first, as for the alloc
    except ConfigError:
        target = None
    if target is not None and target.assignment is not None:
        if target.assignment.value.text.strip().lower() == "efa":
            return (
                f"MOONCAKE_PROTOCOL=efa ({target.where}): sglang's Mooncake over EFA refuses expandable segments "
                "at startup (disaggregation/mooncake/utils.py)"
            )
    engine = service.engine
    hits = find_flags(service.items(), "weight-cache-mode", resolve=engine.resolve_flag, bool_flags=engine.bool_flags)
    if hits and (hits[-1].value_text or "").strip() == "daemon":
        return (
            "--weight-cache-mode daemon: sglang's weight-cache daemon refuses expandable segments at startup "
            "(weight_cache/daemon.py)"
        )
    return None


def without_expandable(alloc_conf: str) -> str | None:
    """The wanted ``key:value`` options less expandable segments (None: nothing left to set)."""
    kept = [o for o in alloc_conf.split(",") if o.partition(":")[0].strip() != EXPANDABLE_KEY]
    return ",".join(kept) or None


def guard_alloc(service: Service, alloc_conf: str | None) -> tuple[str | None, str | None]:
    """The alloc conf the recipe may set on this unit, and what it left alone and why (None: nothing)."""
    if alloc_conf is None or not any(o.partition(":")[0].strip() == EXPANDABLE_KEY for o in alloc_conf.split(",")):
        return alloc_conf, None
    why = expandable_refused(service)
    if why is None:
        return alloc_conf, None
    return without_expandable(alloc_conf), f"{ALLOC} left without expandable segments: {why}"
