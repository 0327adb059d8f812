"""PURE: backups next to a unit's files — naming, ordering, validation, retention, flag-level diffs.

A backup is any ``<file>.bak*`` beside one of the unit's files: ours (``.bak.oom.<epoch>``,
``.bak.rollback.<epoch>``, with ``.1``… when taken) and hand-made ones such as the incident's
``cp $P $P.bak.oom.$(date +%s)`` or a plain ``$P.bak``. Time comes from the name's epoch, else mtime.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from remediate.core.engines import engine_named
from remediate.core.unitfile.edit import SourceFile, UnitSettings, UnitSources, find_server_exec, read_settings
from remediate.errors import ConfigError, RemediateError, UnsafePathError

# <original>.bak[.<tag>][.<epoch>][.<n>] — the epoch is 9–11 digits (2001…2286).
_NAME = re.compile(r"^(?P<orig>.+?)\.bak(?:\.(?P<tag>[A-Za-z][\w-]*))?(?:\.(?P<epoch>\d{9,11}))?(?:\.(?P<n>\d+))?$")


@dataclass(frozen=True)
class Backup:
    path: str
    original: str
    tag: str | None
    time: float
    time_source: str  # "name" or "mtime"
    size: int
    sha256: str
    text: str
    seq: int = 0
    truncated: bool = False  # shorter than a copy can be (a full disk cut a plain `cp` short): never restored
    unsafe: str | None = None  # why this name is not a backup root wrote ("a symlink"): never read nor restored

    def sort_key(self) -> tuple[float, int, str]:
        return (self.time, self.seq, self.path)


def parse_backup_name(path: str) -> tuple[str, str | None, int | None, int] | None:
    """(original, tag, epoch, sequence) for a backup path, or None if it is not one."""
    match = _NAME.fullmatch(path)
    if not match:
        return None
    epoch = int(match.group("epoch")) if match.group("epoch") else None
    return match.group("orig"), match.group("tag"), epoch, int(match.group("n") or 0)


def make_backup(path: str, *, text: str, sha256: str, size: int, mtime: float) -> Backup | None:
    parsed = parse_backup_name(path)
    if parsed is None:
        return None
    original, tag, epoch, seq = parsed
    return Backup(
        path=path,
        original=original,
        tag=tag,
        time=float(epoch) if epoch is not None else mtime,
        time_source="name" if epoch is not None else "mtime",
        size=size,
        sha256=sha256,
        text=text,
        seq=seq,
    )


MAX_READ_BYTES = 16 << 20
"""The most bytes read of one file on a host (templates/_readfile.sh.j2's max_bytes): past it, not read."""

_REJECTED_KEY = re.compile(r"(why|uid|size|mtime|links)=(\S*) ")


def rejected_backup(header: str) -> Backup | None:
    """A backup name that holds no backup of ours, from templates/backups.sh.j2's ``@@rejected`` header
    (``why=symlink uid=1001 size=11 mtime=… path=…``): listed with the reason, never read or restored."""
    fields: dict[str, str] = {}
    pos = 0
    while match := _REJECTED_KEY.match(header, pos):
        fields[match.group(1)] = match.group(2)
        pos = match.end()
    if not header.startswith("path=", pos):
        return None
    backup = make_backup(header[pos + 5 :], text="", sha256="", size=0, mtime=float(fields.get("mtime") or 0))
    if backup is None:
        return None
    why = fields.get("why", "")
    reason = {
        "symlink": "a symlink",
        "owner": f"owned by uid {fields.get('uid', '?')}, not root",
        "links": f"a file with {fields.get('links', '?')} hard links",
        "swapped": "replaced while it was read",
        "type": "not a regular file (a FIFO, a device, a directory)",
        "size": f"larger than the {MAX_READ_BYTES >> 20} MiB read",
    }.get(why, "not a regular file of root's")
    return replace(backup, size=int(fields.get("size") or 0), unsafe=reason)


def looks_truncated(size: int, text: str, original_size: int) -> bool:
    """A backup cut short while it was copied: empty while the file is not, or a whole number of blocks
    shorter than the file and ending mid-line (what ``cp`` leaves when the disk fills)."""
    if size == 0:
        return original_size > 0
    return size < original_size and size % 4096 == 0 and not text.endswith("\n")


def mark_truncated(backup: Backup, original_size: int) -> Backup:
    if backup.unsafe:
        return backup  # its bytes were never read
    return replace(backup, truncated=looks_truncated(backup.size, backup.text, original_size))


def newest_first(backups: Sequence[Backup]) -> list[Backup]:
    return sorted(backups, key=Backup.sort_key, reverse=True)


def swap(sources: UnitSources, path: str, text: str) -> UnitSources:
    """The unit's sources with one file's text replaced (to read what a restore would run)."""
    if sources.fragment.path == path:
        return replace(sources, fragment=SourceFile(path=path, text=text))
    if any(d.path == path for d in sources.dropins):
        dropins = tuple(SourceFile(path=d.path, text=text) if d.path == path else d for d in sources.dropins)
        return replace(sources, dropins=dropins)
    env = dict(sources.env_files or {})
    env[path] = text
    return replace(sources, env_files=env)


def validate_backup(backup: Backup, sources: UnitSources, unit: str) -> UnitSources:
    """Refuse a backup that does not belong to this unit, is empty, or would not run sglang."""
    files = {sources.fragment.path, *(d.path for d in sources.dropins), *(sources.env_files or {})}
    if backup.original not in files:
        raise ConfigError(f"{backup.path} is not a backup of {unit} (its files: {', '.join(sorted(files))})")
    if not backup.text.strip():
        raise ConfigError(f"{backup.path} is empty")
    if "\x00" in backup.text:
        raise ConfigError(f"{backup.path} is not a text file")
    restored = swap(sources, backup.original, backup.text)
    if backup.original == sources.fragment.path and "[Service]" not in backup.text:
        raise ConfigError(f"{backup.path} has no [Service] section: not a service unit")
    try:
        find_server_exec(restored)
    except RemediateError as exc:
        raise ConfigError(f"{backup.path} would not run sglang: {exc}") from None
    return restored


def settings_or_none(sources: UnitSources) -> UnitSettings | None:
    try:
        return read_settings(sources)
    except RemediateError:
        return None


def settings_diff(current: UnitSettings | None, restored: UnitSettings | None) -> list[str]:
    """Flag-level difference a restore would make: ``mem-fraction-static 0.93 → 0.94``."""
    if current is None or restored is None:
        return ["(settings not readable)"]
    lines = []
    engine = engine_named(current.engine)  # the flags named as the unit's engine names them
    for label, attr in (
        (engine.fraction_flag, "mem_fraction_static"),
        (engine.prefill_flag, "chunked_prefill_size"),
        ("PYTORCH_CUDA_ALLOC_CONF", "alloc_conf"),
    ):
        now, then = getattr(current, attr), getattr(restored, attr)
        if now != then:
            lines.append(f"{label} {now or '(unset)'} → {then or '(unset)'}")
    return lines


def choose(backups: Sequence[Backup], to: str) -> list[Backup]:
    """The backup(s) a rollback restores: ``latest`` (the newest transaction: every file backed up in
    that same second) or one PATH."""
    if not backups:
        raise ConfigError("no backups found next to the unit's files")
    if to != "latest":
        for b in backups:
            if b.path == to:
                if b.unsafe:
                    raise UnsafePathError(
                        f"{to} is {b.unsafe}: not a backup remediate wrote, refusing it (remove it, or restore by hand)"
                    )
                if b.truncated:
                    raise ConfigError(f"{to} is truncated ({b.size} bytes): not a complete copy, refusing it")
                return [b]
        raise ConfigError(f"{to} is not a backup of this unit (see `remediate backups`)")
    # A cut-short copy, a symlink or another user's file under a backup's name is never "latest".
    ordered = newest_first([b for b in backups if not b.truncated and not b.unsafe])
    if not ordered:
        raise ConfigError("every backup next to the unit's files is truncated or not root's: none can be restored")
    newest = ordered[0]
    same_txn = [b for b in ordered if b.time == newest.time and b.tag == newest.tag and b.time_source == "name"]
    chosen: dict[str, Backup] = {}
    for b in same_txn or [newest]:
        chosen.setdefault(b.original, b)  # one per original file, the newest
    return list(chosen.values())


def select_prune(backups: Sequence[Backup], keep: int, current_sha: Mapping[str, str]) -> list[Backup]:
    """Backups to delete: per original file, all but the ``keep`` newest — never the newest, never one
    whose bytes equal the current file (the state we run came from it). A truncated backup, or a name that
    is not root's regular file (a symlink, a planted file), neither counts as one of the ``keep`` nor is
    deleted here: it is flagged in the listing for a human to look at."""
    if keep < 1:
        raise ConfigError("--keep must be at least 1")
    doomed: list[Backup] = []
    by_original: dict[str, list[Backup]] = {}
    for b in backups:
        if not b.truncated and not b.unsafe:
            by_original.setdefault(b.original, []).append(b)
    for original, group in by_original.items():
        ordered = newest_first(group)
        for b in ordered[keep:]:
            if b.sha256 == current_sha.get(original):
                continue
            doomed.append(b)
    return doomed
