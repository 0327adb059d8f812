"""The commit of one change on a host (``templates/commit.sh.j2``), under the lock the run already holds:
compare-and-swap, complete backups, every file staged then renamed, daemon-reload, reset-failed, restart.

The script runs on its own once bash has read all of it, so a connection cut mid-commit does not stop it
half-way: :func:`commit` reconnects (which takes the unit's lock back only once the script is done), reads
the script's report from its log on the host and carries on as if the connection had never dropped. When
the host shows no trace of the commit's token, it is sent again with the same token: a first script that
starts late then finds its token claimed and touches nothing, so the commit runs exactly once.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import shlex
from collections.abc import Callable
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
from remediate.host.common import templates
from remediate.host.common.lock import COMMIT_TIMEOUT_S, commit_lock_path, commit_log_path, lock_path
from remediate.models import CommandResult
from remediate.transport.base import Transport

RESUME_WITHIN_S = 60.0  # how long a commit cut by a lost connection tries to reconnect
CONFLICT_EXIT = 76  # a file changed since it was read: nothing written
UNSAFE_EXIT = 79  # a directory another user can change, or a name swapped under the script (@@error unsafe)
DUPLICATE_EXIT = 80  # the commit's token was claimed by another script of it: nothing touched by this one
ABSENT = "absent"  # the sha256 field of a file that does not exist before (or after) the write


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
    old_absent: bool = False  # created by this write (an instance drop-in): no old bytes, no backup
    new_absent: bool = False  # removed by this write (the undo of a created file)

    def render_args(self) -> dict[str, str | None]:
        return {
            "path": self.path,
            "old_sha": ABSENT if self.old_absent else _sha256(self.old_text),
            "new_sha": ABSENT if self.new_absent else _sha256(self.new_text),
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
    unit: str,
    writes: list[FileWrite],
    *,
    epoch: int,
    restart: bool,
    analyze: bool,
    token: str,
    journal: str = "",
    fragment: str = "",
) -> str:
    return templates.render(
        "commit.sh.j2",
        unit=unit,
        files=[w.render_args() for w in writes],
        epoch=epoch,
        restart=restart,
        analyze=analyze,
        fragment=fragment,
        log_path=commit_log_path(unit, token),
        commit_lock=commit_lock_path(unit),
        commit_wait=COMMIT_TIMEOUT_S,
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
    fragment: str = "",
    journal: str = "",
    resume_within: float = RESUME_WITHIN_S,
    token: str | None = None,
) -> CommitReport:
    """Run the remote transaction (``templates/commit.sh.j2``) and parse what it reports.

    ``analyze``: ``systemd-analyze verify`` the unit's ``fragment`` (as the locked read found it; empty: asked of
    systemctl) beside the reload. ``journal``: the line logged to the host's journal (``logger -t remediate``)
    once the files are written, the backup paths appended; masked here, whatever the caller passed.

    Exactly once: one ``token`` for this commit, sent again unchanged after a cut. The script claims it
    (its log, created O_EXCL) before it does anything else, so a host that shows the token is never sent the
    commit again (its log is read once the script is done), and a script that starts late, after it was
    sent again, finds the token claimed and touches nothing (``@@duplicate``). A commit shell that died on
    the host (no exit status, no report) is read back from its log and the files, never assumed to have
    written nothing.

    The caller holds the unit's lock (:func:`remediate.host.common.lock.unit_lock`). Raises ConflictError
    (nothing written), CommitError (``written`` says what holds the new bytes), StateUnknownError
    (the connection could not be re-established)."""
    token = token or secrets.token_hex(8)
    script = render_commit(
        unit, writes, epoch=epoch, restart=restart, analyze=analyze, token=token, journal=journal, fragment=fragment
    )
    resumed = False
    for _attempt in range(SENDS):
        try:
            sent = transport.run("bash -s", stdin=script, timeout=COMMIT_TIMEOUT_S)
        except ConnectionLost as cut:
            resumed = True
            recovered = _after_cut(transport, unit, writes, token, cut.message, resume_within)
            if recovered is None:
                continue  # no trace of the token on the host: safe to send again (a late start is @@duplicate)
            sent = recovered
        if _is_duplicate(sent) or _no_report(sent):
            # Another script of this token ran (the one sent before a cut), or this one died on the host
            # before it could report: what happened is in the token's log and the files.
            sent = _read_back(transport, unit, writes, token, resume_within)
        result = sent
        report = _report(transport.host, writes, result, lambda: file_states(transport, writes))
        report.resumed = resumed
        return report
    raise StateUnknownError(
        transport.host,
        f"the connection was lost {SENDS} times while the commit was being sent and the host shows no trace of it: "
        "nothing was written. Re-running `remediate oom` is safe",
    )


SENDS = 3  # a commit is sent at most this often, always with its one token


def _is_duplicate(result: CommandResult) -> bool:
    return result.exited == DUPLICATE_EXIT and "@@duplicate" in result.stdout.splitlines()


def _no_report(result: CommandResult) -> bool:
    """The commit shell gave no exit status (killed: sshd reports a signal) or printed nothing at all."""
    if result.exited == -1:
        return True
    return not result.ok and not any(
        line.startswith("@@") for line in (result.stdout + "\n" + result.stderr).splitlines()
    )


def _after_cut(
    transport: Transport, unit: str, writes: list[FileWrite], token: str, why: str, within: float
) -> CommandResult | None:
    """After a cut: reconnect (the lock is taken back once our commit script is done) and read the token's
    log. None when the host shows no trace of the token (the script never started)."""
    _reconnect(transport, why, within)
    return _read_log(transport, unit, writes, token, within, missing_ok=True)


def _reconnect(transport: Transport, why: str, within: float) -> None:
    try:
        transport.reconnect(within)
    except RemediateError as exc:
        raise StateUnknownError(
            transport.host,
            f"the connection was lost during the commit ({why}) and could not be re-established within "
            f"{within:.0f}s ({_detail(exc)}): the state on the host is unknown. If the commit script started, "
            "it runs to its end there on its own, under the unit's lock (the unit ends as the old bytes or the "
            "new, with a complete backup). Re-running `remediate oom` is safe: it waits for the lock and "
            "reads what the host holds",
        ) from exc


def _read_back(transport: Transport, unit: str, writes: list[FileWrite], token: str, within: float) -> CommandResult:
    result = _read_log(transport, unit, writes, token, within, missing_ok=False)
    assert result is not None
    return result


def _read_log(
    transport: Transport, unit: str, writes: list[FileWrite], token: str, within: float, *, missing_ok: bool
) -> CommandResult | None:
    """The token's log once its script is done (the commit lock free, waited for up to the commit's own
    limit), as the script's result. A log without its ``@@exit`` line (the script was killed): exit 0 if the
    report got to its ``@@end``, else -1 (the caller reads the files back). A cut here: one reconnect."""
    log = shlex.quote(commit_log_path(unit, token))
    lock = shlex.quote(commit_lock_path(unit))
    command = (
        f"flock -E 75 -w {COMMIT_TIMEOUT_S} {lock} true 2>/dev/null; [ $? -ne 75 ] || echo @@busy; "
        f"if [ -e {log} ]; then cat -- {log}; else echo @@nolog; fi"
    )
    for attempt in range(2):
        try:
            got = transport.run(command, timeout=COMMIT_TIMEOUT_S + 30)
            break
        except ConnectionLost as cut:
            if attempt:
                raise StateUnknownError(
                    transport.host,
                    f"the connection was lost twice while the commit's report was read back ({cut.message}): "
                    f"the state on the host is unknown. Re-running `remediate oom` is safe",
                ) from cut
            _reconnect(transport, cut.message, within)
    lines = got.stdout.splitlines()
    busy = "@@busy" in lines
    lines = [line for line in lines if line != "@@busy"]
    if lines == ["@@nolog"]:
        if missing_ok and not busy:
            return None
        raise CommitError(
            transport.host,
            f"the commit script left no report on the host (its log is missing): {describe_files(transport, writes)}",
            written=_holding_new(transport, writes),
        )
    if busy:
        raise StateUnknownError(
            transport.host,
            f"the commit script on the host still runs after {COMMIT_TIMEOUT_S}s: "
            f"{describe_files(transport, writes)}. Re-running `remediate oom` is safe once it is done",
        )
    text = "\n".join(lines) + "\n"
    last = lines[-1] if lines else ""
    if last.startswith("@@exit "):
        return CommandResult("bash -s", int(last.split()[1]), text, "")
    return CommandResult("bash -s", 0 if "@@end" in lines else -1, text, "")


def _holding_new(transport: Transport, writes: list[FileWrite]) -> tuple[str, ...]:
    states = file_states(transport, writes)
    return tuple(w.path for w in writes if states.get(w.path) == _state(w.new_text, w.new_absent))


def _state(text: str, absent: bool) -> str:
    """What :func:`file_states` reads for a file with ``text`` ('-': no file)."""
    return "-" if absent else _sha256(text)


def file_states(transport: Transport, writes: list[FileWrite]) -> dict[str, str]:
    """Each file's sha256 on the host ('-' when it cannot be read), one round trip."""
    return path_states(transport, [w.path for w in writes])


def path_states(transport: Transport, paths: list[str]) -> dict[str, str]:
    """Each path's sha256 on the host ('-' when it cannot be read), one round trip (bounded in time)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    got = transport.run(f'for p in {quoted}; do sha256sum -- "$p" 2>/dev/null || echo "- $p"; done', timeout=30)
    return {line.split(None, 1)[1].strip(): line.split(None, 1)[0] for line in got.stdout.splitlines() if " " in line}


def describe_files(transport: Transport, writes: list[FileWrite]) -> str:
    """Each file's state in words: the old bytes, the new bytes, or neither (one round trip)."""
    return _describe(writes, file_states(transport, writes))


def _describe(writes: list[FileWrite], sums: dict[str, str]) -> str:
    words = []
    for w in writes:
        sha = sums.get(w.path)
        old, new = _state(w.old_text, w.old_absent), _state(w.new_text, w.new_absent)
        names = {
            old: "no bytes (absent, as before)" if w.old_absent else "the old bytes",
            new: "no bytes (absent, as planned)" if w.new_absent else "the new bytes",
        }
        state = names.get(sha or "", "")
        words.append(f"{w.path} has {state or ('sha256 ' + sha if sha and sha != '-' else 'an unknown state')}")
    return "; ".join(words)


def _report(
    host: str, writes: list[FileWrite], result: CommandResult, states: Callable[[], dict[str, str]] | None = None
) -> CommitReport:
    """The script's report. For a script killed before its end (exit -1), ``states()`` (the files' sha256 on the
    host) says what holds the new bytes, whatever its report got to say."""
    report = CommitReport()
    errors: list[str] = []
    failed_step = ""
    plain: list[str] = []
    already: set[str] = set()
    paths = {str(i): w.path for i, w in enumerate(writes)}
    for line in (result.stdout + "\n" + result.stderr).splitlines():
        head, _, rest = line.partition(" ")
        if head == "@@backup":
            index, _, backup = rest.partition(" ")
            report.backups[paths.get(index, index)] = backup
        elif head == "@@renamed":
            report.written.append(paths.get(rest, rest))
        elif head == "@@already":
            already.add(paths.get(rest, rest))
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
    killed = result.exited == -1
    why = errors[-1] if errors else (plain[-1] if plain else f"exit status {result.exited}")
    if killed and not errors:
        why = "the commit script was killed on the host before its end"
    if result.exited == CONFLICT_EXIT:
        raise ConflictError(host, f"aborted, nothing written: {why}")
    if result.exited == UNSAFE_EXIT and not report.written:
        raise UnsafePathError(f"refused, nothing written: {why}", source=host)
    if killed and states is not None and writes:
        sums = states()
        for w in writes:
            if w.path not in report.written and w.path not in already and sums.get(w.path) == _sha256(w.new_text):
                report.written.append(w.path)
        why += f" ({_describe(writes, sums)})"
    where = f" during the {failed_step}" if failed_step and not errors else ""
    if report.written:
        done = f"{', '.join(report.written)} now hold{'s' if len(report.written) == 1 else ''} the new bytes"
        done += "; daemon-reload done" if report.reloaded else ""
        done += "; restart started" if report.restart_epoch else ""
    else:
        done = ("no file holds the new bytes" if killed else "nothing was written") + (
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


def planned_steps(
    unit: str,
    writes: list[FileWrite],
    epoch: int,
    *,
    restart: bool,
    lock_wait: int,
    capacity: str = "max_total_num_tokens",
) -> list[str]:
    """What a real run does on the host, in order (``--dry-run`` prints it); ``capacity``: the engine's pool line."""
    steps = [f"flock {lock_path(unit)} (wait ≤ {lock_wait} s), held until the run ends"]
    steps.append("claim this commit's token (a re-sent or late copy of the script touches nothing)")
    for w in writes:
        if w.old_absent:
            steps.append(f"create the directory of {w.path} root's 0755 if missing (its parent checked first)")
        steps.append(f"check that only root can change the directories of {w.path} (refuse if not)")
    for w in writes:
        if w.old_absent:
            steps.append(f"check that {w.path} does not exist (abort if it does)")
        else:
            steps.append(f"check sha256({w.path}) == {_sha256(w.old_text)[:12]}… (abort if it changed)")
    for w in writes:
        if w.backup_tag and not w.old_absent:
            steps.append(
                f"copy {w.path} to {w.path}.bak.{w.backup_tag}.{epoch} (into a temp file's descriptor: mode, owner "
                "and times kept, fsynced, verified, renamed)"
            )
    for w in writes:
        steps.append(f"stage the new {w.path} beside it (through its descriptor: same mode/owner, fsync, verified)")
    steps.append("rename every staged file into place (symlinks written through), fsync the directories")
    if restart:
        steps += [
            "systemctl daemon-reload (then require NeedDaemonReload=no)",
            f"systemctl reset-failed {unit}",
            f"systemctl restart {unit}",
            f"wait for /health 200 and {capacity}",
        ]
    return steps
