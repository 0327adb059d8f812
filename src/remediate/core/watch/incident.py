"""Crashes, incidents and a host's history: one crash loop is one incident; what the cap counts.

KubeadmControlPlane's ``minHealthyPeriod`` is the anchor of the count's reset: a failure after the host
stayed healthy that long is a new incident count, not one more retry of the old one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from remediate.core.watch.policy import Policy

DAY_S = 86400.0


@dataclass(frozen=True)
class Crash:
    """One crash seen on a host: when, which invocation, and the diagnosed finding kinds."""

    host: str
    unit: str
    at: float
    invocation: str = ""
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Incident:
    """Crashes of one unit folded together until a fix is decided or the loop goes quiet."""

    id: str
    host: str
    unit: str
    opened_at: float
    last_at: float
    crashes: int = 1
    kinds: tuple[str, ...] = ()
    is_closed: bool = False


@dataclass(frozen=True)
class HostHistory:
    """What the rails need of a host's past: its automatic fixes (rolled back ones too) and health."""

    fixes: tuple[float, ...] = ()
    count_from: float = 0.0  # fixes before this do not count against the cap (a healthy period passed)
    healthy_since: float | None = None  # start of the current healthy stretch, None while crashed
    is_needs_human: bool = False


def fold(incident: Incident | None, crash: Crash, policy: Policy, new_id: str) -> tuple[Incident, bool]:
    """The incident ``crash`` belongs to, and whether it is a new one (``new_id`` names a new one)."""
    if (
        incident is not None
        and not incident.is_closed
        and (incident.host, incident.unit) == (crash.host, crash.unit)
        and 0 <= crash.at - incident.last_at <= policy.fold_window_s
    ):
        kinds = tuple(dict.fromkeys(incident.kinds + crash.kinds))
        return replace(incident, last_at=crash.at, crashes=incident.crashes + 1, kinds=kinds), False
    opened = Incident(new_id, crash.host, crash.unit, crash.at, crash.at, 1, tuple(dict.fromkeys(crash.kinds)))
    return opened, True


def note_crash(history: HostHistory, at: float, policy: Policy) -> HostHistory:
    """The history once a crash is seen at ``at``: a long enough healthy stretch resets the count."""
    if history.healthy_since is not None and at - history.healthy_since >= policy.healthy_period_s:
        return replace(history, count_from=at, healthy_since=None, is_needs_human=False)
    return replace(history, healthy_since=None)


def note_healthy(history: HostHistory, at: float) -> HostHistory:
    """The host was seen healthy at ``at``: the stretch starts now unless it is already running."""
    return history if history.healthy_since is not None else replace(history, healthy_since=at)


def note_fix(history: HostHistory, at: float) -> HostHistory:
    """An automatic fix was started at ``at`` (whatever its outcome: a rolled-back fix counts too)."""
    return replace(history, fixes=(*history.fixes, at))


def clamp_future(history: HostHistory, now: float) -> tuple[HostHistory, tuple[float, ...]]:
    """The history with every time past ``now`` brought back to ``now``, and the times so clamped. A fix
    stamped in the future (written by a run whose clock was ahead, or before the clock was stepped back)
    would otherwise be outside every window — no cooldown, not counted against the cap — until the clock
    caught up with it; clamped, it is the most recent fix, which errs on the side of the rails."""
    future = tuple(t for t in history.fixes if t > now)
    if not future and history.count_from <= now and (history.healthy_since or 0.0) <= now:
        return history, ()
    fixes = tuple(min(t, now) for t in history.fixes)
    healthy = None if history.healthy_since is None else min(history.healthy_since, now)
    return replace(history, fixes=fixes, count_from=min(history.count_from, now), healthy_since=healthy), future


def counted_fixes(history: HostHistory, now: float) -> int:
    """Fixes that count against the daily cap at ``now``."""
    start = max(now - DAY_S, history.count_from)
    return sum(1 for t in history.fixes if t >= start and t <= now)


# A watcher killed mid-fix (SIGKILL, a power cut) leaves its incident ``remediating``. The host's own
# transaction went on without it (the commit runs detached to its end); what the controller's transaction
# log says of that attempt decides how the next watcher resolves it — never by fixing blindly again.
_FINAL = {"rolled_back": "rolled_back", "failed": "failed"}
# The backups a killed attempt made: its ``committed`` record's, else (killed while the host committed) the
# ones its ``committing`` record planned (the reported name wins: a taken name gets ``.1``, host/commit.py).
_COMMITS = ("committing", "committed")
_RECHECKED = {
    "unchanged": "remediated",
    "remediated": "remediated",
    "drift": "remediated",
    "rolled_back": "rolled_back",
    "rolled_back_by_person": "rolled_back_by_person",
}
ROLLED_BACK_BY_PERSON = "rolled_back_by_person"
# The ``acting`` mark of an incident whose recovery decided to put the killed fix's backup back and lost the
# host on the way (the undo's connection cut, or its end unknown): the next recovery goes straight to the undo,
# never to a second re-check whose transaction log would read ``failed`` and close it on the new bytes.
UNDO_PENDING = "undo"
CUT = "cut"  # the ``acting`` mark of a fix that lost its host (before its commit, or for good after it)
# Written ahead of a failed change's own undo (host/common/transaction.py): old bytes found back on the host
# after it are that undo's, which the dead watcher did not see end — not a person's rollback.
ROLLING_BACK = "rolling_back"
_RESTORED = "restored"  # a `rollback` transaction's success (host/restore.py): a person undid the change


def recovery(acting: str | None, me: str, logged: tuple[str, ...]) -> str:
    """How to resolve an incident left ``remediating``: ``"none"`` (this watcher instance is acting on it),
    ``"rolled_back_by_person"`` (a `rollback` of the unit was logged after the fix started: a person undid it,
    and it is never made again behind their back), ``"rolled_back"`` / ``"failed"`` (the attempt's transaction
    logged that end: taken as it is), ``"undo"`` (an undo lost the host — an earlier recovery's, or the change's
    own under ``cut``: put the backup back again), or ``"recheck"`` (committed, succeeded, unknown or never
    logged: run the same one-host `oom` transaction again, which is idempotent — a finished healthy change is
    ``unchanged``, a changed unit whose server was not restarted is ``drift`` and is restarted and verified, a
    server that does not come up is undone). ``acting`` is the instance id the fix's watcher wrote with it
    (``me``: this watcher's, random per start: a PID is no identity, every watcher of a container is PID 1);
    ``logged`` is the unit's transaction events since the fix started, oldest first."""
    if acting == me:
        return "none"
    if _RESTORED in logged:
        return ROLLED_BACK_BY_PERSON
    if acting == UNDO_PENDING:
        return UNDO_PENDING
    if acting == CUT and ROLLING_BACK in logged and logged[-1] != "rolled_back":
        return UNDO_PENDING  # the change's own undo began and lost the host: its end is ours to finish
    return _FINAL.get(logged[-1], "recheck") if logged else "recheck"


def recovered_outcome(recheck: str) -> str:
    """The incident's outcome from the re-run's: the fix holds (``unchanged``, ``drift`` restarted, or
    made now because the first attempt never committed), was rolled back, or else failed."""
    return _RECHECKED.get(recheck, "failed")


def backup_to_restore(recheck: str, logged: tuple[tuple[str, tuple[str, ...]], ...]) -> str | None:
    """The backup to put back when the re-check did not hold (``failed``: e.g. the killed fix's server
    crash-loops on the new bytes, and a re-run with nothing to write cannot undo it): the one the killed
    attempt's commit made (its ``committed`` record, else the ``committing`` one written ahead of the commit:
    killed while the host committed), else None. ``logged`` is (event, backups) per record."""
    if recovered_outcome(recheck) != "failed":
        return None
    for kind in ("committed", "committing"):  # what the commit reported, else what it was about to make
        made = [backups[0] for event, backups in logged if event == kind and backups]
        if made:
            return made[0]
    return None


def committed_backups(logged: tuple[tuple[str, tuple[str, ...]], ...], files: tuple[str, ...]) -> dict[str, str]:
    """Each file the killed fix's commit wrote → the backup it made of the file's bytes before (its backups
    are named ``FILE.bak.TAG.EPOCH``, host/commit.py); ``logged`` is (event, backups) per record."""
    made = [b for kind in _COMMITS for event, backups in logged if event == kind for b in backups]
    return {f: b for f in files for b in made if b.startswith(f + ".bak.")}  # a reported backup wins


def undone_on_host(pairs: dict[str, str], sums: dict[str, str]) -> bool:
    """Whether every file the fix wrote holds again the bytes it had before the fix (its backup's sha256, as
    the host reads both now): someone rolled the fix back — from another controller too, whose `rollback`
    left no record in this one's transaction log. Unreadable ('-') or no pair: not known, so False."""
    if not pairs:
        return False
    return all(sums.get(f, "-") != "-" and sums.get(f) == sums.get(b) for f, b in pairs.items())
