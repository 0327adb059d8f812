"""What to do on one host: the desired state, how to verify it, how long to wait."""

from __future__ import annotations

from dataclasses import dataclass, field

from remediate.core.bounds import check_options
from remediate.core.capacity.observation import Observation
from remediate.core.unitfile.edit import DesiredState
from remediate.core.units import normalise_unit_spec

LOCK_WAIT_S = 30
"""Seconds a run waits for another run's lock on the same unit before it fails with LockHeldError."""
SMI_TIMEOUT_S = 10
"""Seconds each nvidia-smi query may take (TERM then, KILL 2 s later): it hangs after an Xid error."""


@dataclass(frozen=True)
class BudgetOptions:
    """How `plan` and `oom --auto` choose: the target, the proposed chunk, the margin, past observations."""

    target_tokens: int | None = None
    chunked_prefill_size: int | None = None  # the chunk to propose (None: 4096); -1: chunking off
    chunk_is_ceiling: bool = True  # keep the server's chunk when it is already smaller
    margin: float = 0.10
    observations: tuple[Observation, ...] = ()
    allow_raise: bool = False  # `oom --auto --allow-raise`: the plan may go above the fraction that crashed


@dataclass(frozen=True)
class RunOptions:
    """What to do on each host (the desired state plus how to verify it)."""

    desired: DesiredState = field(default_factory=DesiredState)
    unit: str | None = None
    min_tokens: int | None = None
    target_tokens: int | None = None
    timeout: float = 900.0
    dry_run: bool = False
    rollback: bool = True
    lock_wait: int = LOCK_WAIT_S
    smi_timeout: int = SMI_TIMEOUT_S  # --smi-timeout: the bound on each nvidia-smi query of the crash evidence
    server_port: int | None = None
    force: bool = False  # apply the recipe even when the crash evidence contradicts it
    probe_tokens: int | None = None  # once healthy, one prefill of exactly this many tokens must succeed
    auto: BudgetOptions | None = None  # `oom --auto`: the budget plan chooses fraction, chunk and alloc conf
    all_instances: bool = False  # `oom --all-instances`: a template's change, rolled through its instances

    def __post_init__(self) -> None:
        check_options(  # as every face checks them (core/bounds.py): whoever builds the options directly too
            wait_timeout=self.timeout,
            lock_timeout=self.lock_wait,
            smi_timeout=self.smi_timeout,
            probe=self.probe_tokens,
            min_tokens=self.min_tokens,
            target_tokens=self.target_tokens,
        )
        if self.unit is not None:  # an inventory's `unit:` too; `sglang` and `sglang.service` are one unit
            object.__setattr__(self, "unit", normalise_unit_spec(self.unit))  # or a selection (host/units.py)
