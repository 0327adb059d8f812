"""What to do on one host: the desired state, how to verify it, how long to wait."""

from __future__ import annotations

from dataclasses import dataclass, field

from remediate.core.unitfile.edit import DesiredState

LOCK_WAIT_S = 30
"""Seconds a run waits for another run's lock on the same unit before it fails with LockHeldError."""


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
    server_port: int | None = None
    force: bool = False  # apply the recipe even when the crash evidence contradicts it
    probe_tokens: int | None = None  # once healthy, one prefill of exactly this many tokens must succeed
