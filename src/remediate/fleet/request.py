"""What a fleet command was asked to do, before it is resolved per host (fleet/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remediate.core.bounds import check_options
from remediate.core.units import normalise_unit_spec
from remediate.fleet.inventory import HostEntry
from remediate.transport.base import SSHOptions


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
    force: bool = False
    probe_tokens: int | None = None
    retry_file: str | None = None  # --retry-file PATH (inventory rollouts only)
    lock_timeout: int | None = None  # --lock-timeout: seconds to wait for another run's lock (None: 30)
    smi_timeout: int | None = None  # --smi-timeout: seconds each nvidia-smi query may take (None: 10)
    auto: bool = False  # --auto: the budget plan of each host chooses fraction, chunk and alloc conf
    margin: float = 0.10  # --auto: headroom kept beyond the diagnosed need
    allow_raise: bool = False  # --auto --allow-raise: the plan may raise the fraction above the one that crashed
    observations: str | None = None  # the calibration log (None: the state dir's observations.jsonl)
    all_instances: bool = False  # --all-instances: change a template once, restart its running instances in turn
    # The hosts themselves, as a caller already resolved them (the watcher: the host as it polled it, address
    # and ssh settings included): ``targets`` are then only their names, never resolved or expanded again.
    hosts: tuple[HostEntry, ...] = ()

    def __post_init__(self) -> None:
        """Every option checked as the command line checks it (core/bounds.py): the API and the Ansible modules
        refuse what `remediate oom` refuses, with the same line."""
        check_options(
            wait_timeout=self.timeout,
            lock_timeout=self.lock_timeout,
            smi_timeout=self.smi_timeout,
            probe=self.probe_tokens,
            min_tokens=self.min_tokens,
            target_tokens=self.target_tokens,
        )
        if self.unit is not None:
            object.__setattr__(self, "unit", normalise_unit_spec(self.unit))  # a name, a glob, or several
