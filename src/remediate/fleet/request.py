"""What each fleet command was asked to do, before it is resolved per host (fleet/settings.py).

One frozen request per command (the CLI builds it from its typed parameters, the API takes it, the Ansible
modules and scripts build it too): every option checked as the command line checks it (core/bounds.py), so
each face refuses the same input with the same line. ``None`` is "not given": the inventory's value, else the
built-in default. The hosts-reaching fields (``targets``, ``inventory``, ``ssh``, ``unit``) are
:class:`HostsRequest`'s, the same in every request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from remediate.core.bounds import check_options
from remediate.core.units import normalise_unit_spec
from remediate.fleet.inventory import HostEntry
from remediate.transport.base import SSHOptions

__all__ = [
    "BackupsRequest",
    "DesiredArgs",
    "DiagnoseRequest",
    "HostsRequest",
    "OfflinePlanRequest",
    "OomRequest",
    "PlanRequest",
    "RollbackRequest",
    "StatusRequest",
    "StrategyArgs",
    "WatchRequest",
]


@dataclass(frozen=True)
class DesiredArgs:
    """The desired state asked for (``--mem-fraction-static``…), typed and checked by ``api.desired_args``;
    None = not given: the inventory's value, else the built-in recipe. Resolved per host into the core's
    :class:`~remediate.core.unitfile.edit.DesiredState` (fleet/settings.py ``desired_state``)."""

    mem_fraction_static: Decimal | None = None
    mem_fraction_step: Decimal | None = None
    chunked_prefill_size: int | None = None
    alloc_conf: str | None = None


@dataclass(frozen=True)
class StrategyArgs:
    """The rollout flags given (``--canary``, ``--batch``, ``--forks``, ``--max-failures``,
    ``--pause-after-canary``); None = not given: the inventory's ``rollout:``, else the default. Resolved into
    a :class:`~remediate.fleet.rollout.Strategy` by fleet/settings.py ``build_strategy``."""

    canary: int | None = None
    batch: str | None = None
    forks: int | None = None
    max_failures: str | None = None
    pause_after_canary: bool = False


@dataclass(frozen=True)
class HostsRequest:
    """Which hosts, how to reach them, which unit: the fields every remote command's request starts with."""

    targets: tuple[str, ...] = ()
    inventory: str | None = None
    ssh: SSHOptions = field(default_factory=SSHOptions)
    unit: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))  # a list given stays hashable and frozen


@dataclass(frozen=True)
class OomRequest(HostsRequest):
    """Everything `remediate oom` was asked to do."""

    desired: DesiredArgs = field(default_factory=DesiredArgs)
    min_tokens: int | None = None
    target_tokens: int | None = None
    timeout: float = 900.0
    dry_run: bool = False
    rollback: bool = True
    strategy: StrategyArgs = field(default_factory=StrategyArgs)
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
        super().__post_init__()
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


@dataclass(frozen=True)
class RollbackRequest(HostsRequest):
    """`remediate rollback`: each host's latest backup (or ``to``) restored, as a rollout."""

    to: str = "latest"
    timeout: float = 900.0
    dry_run: bool = False
    strategy: StrategyArgs = field(default_factory=StrategyArgs)
    retry_file: str | None = None
    lock_timeout: int | None = None
    all_instances: bool = False
    hosts: tuple[HostEntry, ...] = ()  # already resolved (the watcher's, as polled): as OomRequest.hosts

    def __post_init__(self) -> None:
        super().__post_init__()
        check_options(wait_timeout=self.timeout, lock_timeout=self.lock_timeout)


@dataclass(frozen=True)
class BackupsRequest(HostsRequest):
    """`remediate backups`: each host's backups listed; with ``prune_keep``, all but the newest N deleted."""

    prune_keep: int | None = None
    dry_run: bool = False
    lock_timeout: int | None = None
    forks: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_options(lock_timeout=self.lock_timeout, forks=self.forks)


@dataclass(frozen=True)
class StatusRequest(HostsRequest):
    """`remediate status`: each host's unit, state and memory settings."""

    forks: int | None = None  # hosts at once (None: the inventory's ``rollout: forks``, else 10)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_options(forks=self.forks)


@dataclass(frozen=True)
class DiagnoseRequest(HostsRequest):
    """`remediate diagnose`: each host's latest failure and why; with ``journal``, a saved journal instead
    (no host: ``targets`` and ``inventory`` stay empty, ``unit_file`` the local unit whose settings to use)."""

    lines: int | None = None  # journal lines to read (None: host/diagnose/diagnose.py's DEFAULT_LINES)
    since: str | None = None  # restarts to look back over, or a journalctl time
    smi_timeout: int | None = None
    forks: int | None = None
    journal: str | None = None
    unit_file: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_options(lines=self.lines, smi_timeout=self.smi_timeout, forks=self.forks)


@dataclass(frozen=True)
class PlanRequest(HostsRequest):
    """`remediate plan`: the pool and headroom per fraction; with ``journal``, from a saved journal."""

    target_tokens: int | None = None
    chunked_prefill_size: int | None = None
    margin: float = 0.10
    observations: str | None = None  # the calibration log (None: the state directory's)
    forks: int | None = None
    journal: str | None = None
    unit_file: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_options(target_tokens=self.target_tokens, forks=self.forks)


@dataclass(frozen=True)
class OfflinePlanRequest:
    """`remediate plan --offline`: a what-if from numbers given, no host (``targets`` must stay empty)."""

    gpu_mem_gib: float | None = None
    free_after_weights_gib: float | None = None
    cell_bytes: float | None = None
    page_size: int = 1
    target_tokens: int | None = None
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class WatchRequest(HostsRequest):
    """`remediate watch`: the hosts to watch (one unit each), the policy, the state directory, where to report."""

    policy: str | None = None
    interval_s: float = 15.0
    lookback_s: float | None = None
    healthy_period_s: float | None = None
    dry_run: bool = False
    once: bool = False
    state_dir: str | None = None
    wait_timeout: float = 900.0
    webhook: str | None = None
    metrics_listen: str | None = None
    follow: bool = True  # follow each host's journal (one channel); the poll stays the fallback

    def __post_init__(self) -> None:
        super().__post_init__()
        check_options(wait_timeout=self.wait_timeout)  # as `watch --wait-timeout` (core/bounds.py)
