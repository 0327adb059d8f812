"""The commit of one change on a host (``templates/commit.sh.j2``), under the lock the run already holds:
compare-and-swap, backup, atomic write, daemon-reload, reset-failed, restart."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

from remediate.core.unitfile.report import display_text
from remediate.errors import ConflictError, RemediationError
from remediate.host import templates
from remediate.host.lock import lock_path
from remediate.transport.base import Transport

COMMIT_TIMEOUT_S = 120  # the script itself: hashes, copies, daemon-reload, and systemctl restart's own wait
CONFLICT_EXIT = 76  # a file changed since it was read: nothing written


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogateescape")).decode("ascii")


@dataclass
class FileWrite:
    """One file the commit script replaces atomically."""

    path: str
    old_text: str
    new_text: str
    backup_tag: str | None = "oom"

    def render_args(self) -> dict[str, str | None]:
        return {
            "path": self.path,
            "old_sha": _sha256(self.old_text),
            "new_sha": _sha256(self.new_text),
            "b64": _b64(self.new_text),
            "backup_tag": self.backup_tag,
        }


@dataclass
class CommitReport:
    backups: dict[str, str] = field(default_factory=dict)
    restart_epoch: float | None = None
    invocation_id: str | None = None
    analyze: list[str] = field(default_factory=list)


def commit(
    transport: Transport,
    unit: str,
    writes: list[FileWrite],
    *,
    epoch: int,
    restart: bool = True,
    analyze: bool = False,
    journal: str = "",
) -> CommitReport:
    """Run the remote transaction (``templates/commit.sh.j2``) and parse what it reports.

    ``journal``: the line logged to the host's journal (``logger -t remediate``) once the files are
    written, the backup paths appended; masked here, whatever the caller passed.
    The caller holds the unit's lock (:func:`remediate.host.lock.unit_lock`)."""
    script = templates.render(
        "commit.sh.j2",
        unit=unit,
        files=[w.render_args() for w in writes],
        epoch=epoch,
        restart=restart,
        analyze=analyze,
        journal=" ".join(display_text(journal).split()),
    )
    result = transport.run("bash -s", stdin=script, timeout=COMMIT_TIMEOUT_S)
    report = CommitReport()
    for line in result.stdout.splitlines():
        head, _, rest = line.partition(" ")
        if head == "@@backup":
            index, _, backup = rest.partition(" ")
            report.backups[writes[int(index)].path] = backup
        elif head == "@@restart":
            report.restart_epoch = float(rest)
        elif head == "@@restarted":
            report.invocation_id = rest.strip() or None
        elif head == "@@analyze":
            report.analyze.append(rest)
    if result.ok:
        return report
    errors = [line[len("@@error ") :] for line in result.stderr.splitlines() if line.startswith("@@error ")]
    message = errors[-1] if errors else (result.stderr.strip().splitlines() or [f"exit {result.exited}"])[-1]
    kind, _, detail = message.partition(" ")
    if result.exited == CONFLICT_EXIT:
        raise ConflictError(transport.host, f"aborted, nothing written: {detail}")
    raise RemediationError(transport.host, f"commit failed at {kind or 'step'}: {detail or message}")


def planned_steps(unit: str, writes: list[FileWrite], epoch: int, *, restart: bool, lock_wait: int) -> list[str]:
    """What a real run does on the host, in order (``--dry-run`` prints it)."""
    steps = [f"flock {lock_path(unit)} (wait ≤ {lock_wait} s), held until the run ends"]
    for w in writes:
        steps.append(f"check sha256({w.path}) == {_sha256(w.old_text)[:12]}… (abort if it changed)")
    for w in writes:
        if w.backup_tag:
            steps.append(f"cp -p {w.path} {w.path}.bak.{w.backup_tag}.{epoch}")
    for w in writes:
        steps.append(f"write {w.path} atomically (temp file, same mode/owner, fsync, rename, fsync dir)")
    if restart:
        steps += [
            "systemctl daemon-reload (then require NeedDaemonReload=no)",
            f"systemctl reset-failed {unit}",
            f"systemctl restart {unit}",
            "wait for /health 200 and max_total_num_tokens",
        ]
    return steps
