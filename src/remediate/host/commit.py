"""The commit of one change on a host (``templates/commit.sh.j2``), under the lock the run already holds:
compare-and-swap, complete backups, every file staged then renamed, daemon-reload, reset-failed, restart.

The script runs on its own once bash has read all of it, so a connection cut mid-commit does not stop it
half-way: :func:`commit` reconnects (which takes the unit's lock back only once the script is done), reads
the script's report from its log on the host and carries on as if the connection had never dropped. When
the script never started, nothing was written and it is sent again (the compare-and-swap makes that safe).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import shlex
from dataclasses import dataclass, field

from remediate.core.unitfile.report import display_text
from remediate.errors import (
    CommitError,
    ConflictError,
    ConnectionLost,
    RemediateError,
    StateUnknownError,
    UnsafePathError,
)
from remediate.host import templates
from remediate.host.lock import commit_lock_path, commit_log_path, lock_path
from remediate.models import CommandResult
from remediate.transport.base import Transport

COMMIT_TIMEOUT_S = 450  # the script's own limits: daemon-reload 90 s, reset-failed 30 s, restart 300 s, copies
RESUME_WITHIN_S = 60.0  # how long a commit cut by a lost connection tries to reconnect
CONFLICT_EXIT = 76  # a file changed since it was read: nothing written
UNSAFE_EXIT = 79  # a directory another user can change, or a name swapped under the script (@@error unsafe)


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
    written: list[str] = field(default_factory=list)  # paths renamed into place by this commit
    reloaded: bool = False
    restart_epoch: float | None = None
    invocation_id: str | None = None
    state: dict[str, str] = field(default_factory=dict)  # `systemctl show` right after the restart
    analyze: list[str] = field(default_factory=list)
    resumed: bool = False  # the connection was cut and the report was read back after a reconnect


def render_commit(
    unit: str, writes: list[FileWrite], *, epoch: int, restart: bool, analyze: bool, token: str, journal: str = ""
) -> str:
    return templates.render(
        "commit.sh.j2",
        unit=unit,
        files=[w.render_args() for w in writes],
        epoch=epoch,
        restart=restart,
        analyze=analyze,
        log_path=commit_log_path(unit, token),
        commit_lock=commit_lock_path(unit),
        journal=" ".join(display_text(journal).split()),
    )


def commit(
    transport: Transport,
    unit: str,
    writes: list[FileWrite],
    *,
    epoch: int,
    restart: bool = True,
    analyze: bool = False,
    journal: str = "",
    resume_within: float = RESUME_WITHIN_S,
) -> CommitReport:
    """Run the remote transaction (``templates/commit.sh.j2``) and parse what it reports.

    ``journal``: the line logged to the host's journal (``logger -t remediate``) once the files are
    written, the backup paths appended; masked here, whatever the caller passed.

    The caller holds the unit's lock (:func:`remediate.host.lock.unit_lock`). Raises ConflictError
    (nothing written), CommitError (``written`` says what holds the new bytes), StateUnknownError
    (the connection could not be re-established)."""
    resumed = False
    for _attempt in range(2):
        token = secrets.token_hex(8)
        script = render_commit(
            unit, writes, epoch=epoch, restart=restart, analyze=analyze, token=token, journal=journal
        )
        try:
            result = transport.run("bash -s", stdin=script, timeout=COMMIT_TIMEOUT_S)
        except ConnectionLost as cut:
            resumed = True
            recovered = _recover(transport, unit, writes, token, cut, resume_within)
            if recovered is None:
                continue  # the script never ran on the host: nothing was written, send it again
            result = recovered
        report = _report(transport.host, writes, result)
        report.resumed = resumed
        return report
    raise StateUnknownError(
        transport.host, "the connection was lost twice while the commit was being sent; nothing was written"
    )


def _recover(
    transport: Transport, unit: str, writes: list[FileWrite], token: str, cut: ConnectionLost, within: float
) -> CommandResult | None:
    """After a cut: reconnect (the lock comes back once the host's commit script is done) and read its log.
    None when the script never started there."""
    try:
        transport.reconnect(within)
    except RemediateError as exc:
        raise StateUnknownError(
            transport.host,
            f"the connection was lost during the commit ({cut.message}) and could not be re-established within "
            f"{within:.0f}s ({_detail(exc)}): the state on the host is unknown. If the commit script started, "
            "it runs to its end there on its own, under the unit's lock (the unit ends as the old bytes or the "
            "new, with a complete backup). Re-running `remediate oom` is safe: it waits for the lock and "
            "reads what the host holds",
        ) from exc
    log = shlex.quote(commit_log_path(unit, token))
    got = transport.run(f"cat -- {log} 2>/dev/null || echo @@nolog", timeout=30)
    lines = got.stdout.splitlines()
    if lines == ["@@nolog"]:
        return None
    last = lines[-1] if lines else ""
    if last.startswith("@@exit "):
        return CommandResult("bash -s", int(last.split()[1]), got.stdout, "")
    raise StateUnknownError(
        transport.host,
        "the connection was lost during the commit and the commit script on the host stopped before its end "
        f"(killed?): {describe_files(transport, writes)}. Re-running `remediate oom` is safe",
    )


def describe_files(transport: Transport, writes: list[FileWrite]) -> str:
    """Each file's state in words: the old bytes, the new bytes, or neither (one round trip)."""
    quoted = " ".join(shlex.quote(w.path) for w in writes)
    got = transport.run(f'for p in {quoted}; do sha256sum -- "$p" 2>/dev/null || echo "- $p"; done', timeout=30)
    sums = {line.split(None, 1)[1].strip(): line.split(None, 1)[0] for line in got.stdout.splitlines() if " " in line}
    words = []
    for w in writes:
        sha = sums.get(w.path)
        state = {_sha256(w.old_text): "the old bytes", _sha256(w.new_text): "the new bytes"}.get(sha or "", "")
        words.append(f"{w.path} has {state or ('sha256 ' + sha if sha and sha != '-' else 'an unknown state')}")
    return "; ".join(words)


def _report(host: str, writes: list[FileWrite], result: CommandResult) -> CommitReport:
    report = CommitReport()
    errors: list[str] = []
    failed_step = ""
    plain: list[str] = []
    paths = {str(i): w.path for i, w in enumerate(writes)}
    for line in (result.stdout + "\n" + result.stderr).splitlines():
        head, _, rest = line.partition(" ")
        if head == "@@backup":
            index, _, backup = rest.partition(" ")
            report.backups[paths.get(index, index)] = backup
        elif head == "@@renamed":
            report.written.append(paths.get(rest, rest))
        elif head == "@@reloaded":
            report.reloaded = True
        elif head == "@@restart":
            report.restart_epoch = float(rest)
        elif head == "@@restarted":
            report.invocation_id = rest.strip() or None
        elif head == "@@state":
            key, sep, value = rest.partition("=")
            if sep and key:
                report.state[key] = value
        elif head == "@@analyze":
            report.analyze.append(rest)
        elif head == "@@error":
            errors.append(rest.partition(" ")[2])
        elif head == "@@failed":
            failed_step = rest
        elif line.strip() and not line.startswith("@@"):
            plain.append(line.strip())
    if result.ok:
        return report
    why = errors[-1] if errors else (plain[-1] if plain else f"exit status {result.exited}")
    if result.exited == CONFLICT_EXIT:
        raise ConflictError(host, f"aborted, nothing written: {why}")
    if result.exited == UNSAFE_EXIT and not report.written:
        raise UnsafePathError(f"refused, nothing written: {why}", source=host)
    where = f" during the {failed_step}" if failed_step and not errors else ""
    if report.written:
        done = f"{', '.join(report.written)} now hold{'s' if len(report.written) == 1 else ''} the new bytes"
        done += "; daemon-reload done" if report.reloaded else ""
        done += "; restart started" if report.restart_epoch else ""
    else:
        done = "nothing was written" + (
            f" (backup {', '.join(report.backups.values())} kept)" if report.backups else ""
        )
    raise CommitError(
        host,
        f"commit failed{where}: {why}; {done}",
        written=tuple(report.written),
        backups=tuple(report.backups.values()),
        reloaded=report.reloaded,
        restarted=report.restart_epoch is not None,
    )


def _detail(exc: RemediateError) -> str:
    """An error's message without its host prefix."""
    return str(getattr(exc, "message", exc))


def planned_steps(unit: str, writes: list[FileWrite], epoch: int, *, restart: bool, lock_wait: int) -> list[str]:
    """What a real run does on the host, in order (``--dry-run`` prints it)."""
    steps = [f"flock {lock_path(unit)} (wait ≤ {lock_wait} s), held until the run ends"]
    for w in writes:
        steps.append(f"check sha256({w.path}) == {_sha256(w.old_text)[:12]}… (abort if it changed)")
    for w in writes:
        if w.backup_tag:
            steps.append(f"cp -p {w.path} {w.path}.bak.{w.backup_tag}.{epoch} (via a temp name, fsynced, verified)")
    for w in writes:
        steps.append(f"stage the new {w.path} beside it (same mode/owner, fsync, verified)")
    steps.append("rename every staged file into place (symlinks written through), fsync the directories")
    if restart:
        steps += [
            "systemctl daemon-reload (then require NeedDaemonReload=no)",
            f"systemctl reset-failed {unit}",
            f"systemctl restart {unit}",
            "wait for /health 200 and max_total_num_tokens",
        ]
    return steps
