"""The controller's state files (issue 31): never written through a link, only in a directory of the user's
own, whole lines or none (a real full tmpfs under the audit log), a corrupt watch.db named in one line while
`watch status` still prints what it can read."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.controller import state as state_mod
from remediate.controller.transactions import record_transaction
from remediate.controller.watch_audit import AUDIT, append_event, read_audit
from remediate.controller.watch_state import DB, WatchState
from remediate.errors import ConfigError

BIN = Path(sys.executable).parent


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(path))
    return path


def _cli(*argv: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REMEDIATE_STATE_DIR": str(state)}
    return subprocess.run([str(BIN / "remediate"), *argv], capture_output=True, text=True, env=env, timeout=60)


def test_a_symlinked_transactions_record_is_refused_and_its_victim_untouched(state: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    victim.chmod(0o600)
    (state / "transactions.jsonl").symlink_to(victim)
    with pytest.raises(ConfigError) as caught:
        state_mod.check_state_dir()  # before any host: `oom`/`rollback` exit 2
    assert str(caught.value) == (
        f"{state}/transactions.jsonl: is a symbolic link: nothing is written through a link; remove it"
    )
    with pytest.raises(ConfigError, match="symbolic link"):
        record_transaction({"host": "h", "event": "x"})
    ran = _cli("rollback", "gpu-01", state=state)
    assert (ran.returncode, ran.stderr.count("\n")) == (2, 1), ran.stderr
    assert "transactions.jsonl: is a symbolic link" in ran.stderr
    assert victim.read_text() == "root only\n" and (victim.stat().st_mode & 0o777) == 0o600


def test_a_state_dir_of_another_uid_or_writable_by_others_is_refused_in_one_line(state: Path) -> None:
    os.chown(state, 4242, 4242)
    with pytest.raises(ConfigError) as caught:
        state_mod.check_state_dir()
    assert str(caught.value).startswith(f"{state}: the state directory is owned by uid 4242, not by this user")
    ran = _cli("oom", "gpu-01", state=state)
    assert (ran.returncode, ran.stderr.count("\n")) == (2, 1) and str(state) in ran.stderr, ran.stderr
    os.chown(state, os.geteuid(), os.getegid())
    state.chmod(0o777)
    with pytest.raises(ConfigError, match=r"writable by group or others \(mode 777\): chmod go-w"):
        state_mod.check_state_dir()
    assert not (state / "transactions.jsonl").exists()


def test_a_new_state_file_is_created_exclusively_and_private_whatever_the_umask(state: Path) -> None:
    old = os.umask(0)
    try:
        path = record_transaction({"host": "h", "event": "committed"})
    finally:
        os.umask(old)
    assert (path.stat().st_mode & 0o777) == 0o600
    path.chmod(0o644)  # an existing file's mode is fixed too
    record_transaction({"host": "h", "event": "healthy"})
    assert (path.stat().st_mode & 0o777) == 0o600 and len(path.read_text().splitlines()) == 2


def test_a_line_cut_by_a_crash_never_glues_the_next_record(state: Path) -> None:
    (state / "transactions.jsonl").write_text('{"host": "h", "ev')  # a crash mid-write
    (state / "transactions.jsonl").chmod(0o600)
    record_transaction({"host": "h", "event": "committed"})
    lines = (state / "transactions.jsonl").read_text().splitlines()
    assert lines[0] == '{"host": "h", "ev' and json.loads(lines[1])["event"] == "committed"


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 16 KiB tmpfs (root mounts it; unmounted after): its writes run out of space mid-line."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", str(mount)], check=True)  # noqa: S607
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)  # noqa: S607


def test_a_full_disk_under_the_audit_log_refuses_the_event_in_one_line_never_glued(full_disk: Path) -> None:
    event = {"event": "detected", "host": "gpu-01", "detail": "x" * 3000}
    written = 0
    with pytest.raises(ConfigError) as caught:
        for _ in range(20):  # 16 KiB: the sixth event is cut by the disk
            append_event(full_disk, {**event, "n": written})
            written += 1
    message = str(caught.value)
    assert message.startswith(f"{full_disk}/{AUDIT}: the record was not written (No space left on device)")
    assert "\n" not in message
    audit = read_audit(full_disk)
    assert (audit.skipped, [e["n"] for e in audit.events]) == (0, list(range(written)))
    assert (full_disk / AUDIT).read_bytes().endswith(b"}\n")  # the cut line taken back: every line whole


def _corrupt_db(state: Path, how: str) -> None:
    if how == "not sqlite":
        (state / DB).write_bytes(b"this is not a database\n" * 200)
    else:  # a real database cut short
        WatchState(state).close()
        with sqlite3.connect(state / DB) as db:
            db.execute("PRAGMA journal_mode=DELETE")
            db.executemany("INSERT INTO kv VALUES (?, ?)", [(str(i), "v" * 500) for i in range(200)])
        data = (state / DB).read_bytes()
        (state / DB).write_bytes(data[: len(data) // 3])
        for extra in ("-wal", "-shm"):
            (state / (DB + extra)).unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["not sqlite", "truncated"])
def test_a_corrupt_watch_db_is_named_in_one_line_and_status_prints_what_it_can(state: Path, how: str) -> None:
    append_event(state, {"event": "detected", "host": "gpu-01"})
    with (state / AUDIT).open("a") as audit:
        audit.write("{not json\n")  # a corrupt audit line: skipped and counted
    _corrupt_db(state, how)
    shown = _cli("watch", "status", state=state)
    assert shown.returncode == 2, shown.stderr
    assert "gpu-01: crashed" in shown.stdout and "paused: unknown" in shown.stdout
    warnings = shown.stderr.splitlines()
    assert any(f"{state}/{AUDIT}: 1 line(s) not an event, skipped" in w for w in warnings), warnings
    assert any(w.startswith(f"remediate: warning: {state}/{DB}: ") and "move it aside" in w for w in warnings)
    assert "Traceback" not in shown.stderr
    for verb in ("pause", "resume"):
        ran = _cli("watch", verb, state=state)
        assert (ran.returncode, ran.stderr.count("\n")) == (2, 1), ran.stderr
        assert ran.stderr.startswith(f"remediate: {state}/{DB}: ") and "move it aside" in ran.stderr
    (state / DB).rename(state / (DB + ".corrupt"))  # what the line says to do: then the switches work again
    for extra in ("-wal", "-shm"):
        (state / (DB + extra)).unlink(missing_ok=True)
    assert _cli("watch", "pause", state=state).returncode == 0
    assert "paused: yes" in _cli("watch", "status", state=state).stdout


def test_a_symlinked_watch_db_is_refused(state: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.db"
    victim.write_bytes(b"")
    (state / DB).symlink_to(victim)
    ran = _cli("watch", "pause", state=state)
    assert ran.returncode == 2 and "is a symbolic link" in ran.stderr and victim.read_bytes() == b""


def test_the_state_directory_is_resolved_in_one_module() -> None:
    """Only controller/state.py reads the variables that place the state directory; every other module asks
    its ``state_dir``."""
    package = Path(state_mod.__file__).resolve().parents[1]
    readers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if any(name in path.read_text() for name in ('"XDG_STATE_HOME"', '"REMEDIATE_STATE_DIR"', ".local/state"))
    )
    assert readers == ["controller/state.py"]
