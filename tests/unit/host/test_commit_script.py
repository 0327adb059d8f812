"""templates/commit.sh.j2 and the locked probe.sh.j2 run for real (bash, coreutils, flock) on real files in tmp_path.

Faults that cannot be made real here (a rename or copy failing half-way) come from a one-command shim on
PATH; the sandbox e2e matrix (tests/e2e/test_faults.py) makes the rest real: full disk, read-only dirs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from remediate.host.common import templates
from remediate.host.common.commit import FileWrite
from remediate.host.common.lock import LOCK_BROKEN_EXIT, LOCK_HELD_EXIT
from remediate.host.common.probe import probe_script
from tests.support.scripts import (
    ENV_NEW,
    ENV_OLD,
    EPOCH,
    NEW,
    OLD,
    UNIT,
    forward,
    names,
    rendered_many,
    run,
    shim,
    two_files,
    undo_of,
)

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "flock", "sha256sum", "base64", "mktemp", "sync", "readlink")),
    reason="needs bash and coreutils/util-linux",
)

# -- 1. several files: stage all, rename all; an undo restores exactly what was renamed -----------------


def test_a_rename_failing_between_two_files_is_undone_exactly(tmp_path: Path) -> None:
    unit, env = two_files(tmp_path)
    writes = forward(unit, env)
    fail_second = shim(
        tmp_path,
        "mv",
        f'case "$*" in *{env}) echo "mv: cannot move: Input/output error" >&2; exit 1;; esac\nexec "$REAL" "$@"',
    )
    failed = run(rendered_many(writes, run_dir=tmp_path / "run"), fail_second)
    assert failed.returncode != 0
    assert "@@renamed 0\n" in failed.stdout and "@@renamed 1" not in failed.stdout
    assert unit.read_text() == NEW and env.read_text() == ENV_OLD  # the state the undo must handle

    undone = run(rendered_many(undo_of(writes), run_dir=tmp_path / "run", token="und0"))
    assert undone.returncode == 0, undone.stdout  # not 76: the env file is checked against its old bytes
    assert unit.read_text() == OLD and env.read_text() == ENV_OLD
    assert "@@renamed 0\n" in undone.stdout and "@@already 1\n" in undone.stdout
    assert unit.stat().st_mode & 0o777 == 0o640


def test_staging_that_fails_in_the_second_directory_writes_nothing(tmp_path: Path) -> None:
    unit, env = two_files(tmp_path)
    no_space = shim(
        tmp_path,
        "mktemp",
        f'case "$*" in *{env.parent}/.remediate.*) echo "mktemp: No space left on device" >&2; exit 1;; esac\n'
        'exec "$REAL" "$@"',
    )
    failed = run(rendered_many(forward(unit, env), run_dir=tmp_path / "run"), no_space)
    assert failed.returncode != 0 and "@@renamed" not in failed.stdout
    assert "@@failed staging of the new" in failed.stdout and "No space left on device" in failed.stdout
    assert unit.read_text() == OLD and env.read_text() == ENV_OLD
    # Complete backups of both files exist; no temp file is left in either directory.
    assert names(unit.parent) == sorted([UNIT, f"{UNIT}.bak.oom.{EPOCH}"])
    assert names(env.parent) == sorted(["sglang", f"sglang.bak.oom.{EPOCH}"])


# -- 2. backups are complete or absent -----------------------------------------------------------------


def test_a_backup_cut_short_by_a_full_disk_leaves_no_partial_backup_and_writes_nothing(tmp_path: Path) -> None:
    unit, env = two_files(tmp_path)
    half = shim(  # the backup's copy is `cat FILE` into the temp file's fd
        tmp_path,
        "cat",
        'case "${@: -1}" in *.log) exec "$REAL" "$@";; esac\n'
        'head -c 7 -- "${@: -1}"\necho "cat: write error: No space left on device" >&2; exit 1',
    )
    failed = run(rendered_many(forward(unit, env), run_dir=tmp_path / "run"), half)
    assert failed.returncode != 0
    assert "No space left on device" in failed.stdout and "@@backup" not in failed.stdout
    assert names(unit.parent) == [UNIT], "no truncated UNIT.bak.oom.<epoch>, no temp file"
    assert unit.read_text() == OLD and env.read_text() == ENV_OLD


# -- 3. a script cut while it is being sent runs nothing -----------------------------------------------


@pytest.mark.parametrize("fraction", [0.2, 0.4, 0.6, 0.8, 0.95, 0.995])
def test_a_script_cut_mid_send_runs_nothing(tmp_path: Path, fraction: float) -> None:
    unit, env = two_files(tmp_path)
    script = rendered_many(forward(unit, env), run_dir=tmp_path / "run")
    cut = run(script[: int(len(script) * fraction)])
    assert cut.returncode != 0
    assert unit.read_text() == OLD and env.read_text() == ENV_OLD
    assert names(unit.parent) == [UNIT] and names(env.parent) == ["sglang"], "no backup, no temp file"


def test_the_script_finishes_when_its_connection_is_gone(tmp_path: Path) -> None:
    """Its stdout closed before it starts (the SSH channel died): it still runs to its end, and its report
    is in the log the caller reads after a reconnect. (A script writing to the dead pipe dies of SIGPIPE.)"""
    unit, env = two_files(tmp_path)
    proc = subprocess.Popen(["bash", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdout.close()
    proc.stdin.write(rendered_many(forward(unit, env), run_dir=tmp_path / "run").encode())
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert unit.read_text() == NEW and env.read_text() == ENV_NEW
    log = (tmp_path / "run" / f"{UNIT}.commit.t0k3n.log").read_text()
    assert "@@renamed 0\n@@written 0" in log and log.endswith("@@end\n@@exit 0\n")


# -- 4. symlinks are written through -------------------------------------------------------------------


def test_a_symlinked_unit_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "srv" / "units" / UNIT
    real.parent.mkdir(parents=True)
    real.write_text(OLD)
    real.chmod(0o640)
    link = tmp_path / "system" / UNIT
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(real, link.parent))
    done = run(rendered_many([FileWrite(str(link), OLD, NEW)], run_dir=tmp_path / "run"))
    assert done.returncode == 0, done.stdout
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert real.read_text() == NEW and real.stat().st_mode & 0o777 == 0o640
    backup = link.with_name(f"{UNIT}.bak.oom.{EPOCH}")
    assert not backup.is_symlink() and backup.read_text() == OLD
    assert names(real.parent) == [UNIT]


# -- 5. the lock: root's own directory, failures that are not "held" say what they are ----------------


def lock_script(lock: Path, wait: int = 1) -> str:
    """The locked read (probe.sh.j2 with lock_wait) for a unit whose lock file is ``lock``."""
    return probe_script(lock.name.removesuffix(".lock"), lock_dir=str(lock.parent), lock_wait=wait)


def test_a_world_writable_lock_directory_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "lock"
    shared.mkdir()
    shared.chmod(0o1777)  # /run/lock: anyone could pre-create and hold the lock
    got = subprocess.run(
        ["bash", "-c", lock_script(shared / "x.lock")], stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    assert got.returncode == LOCK_BROKEN_EXIT
    assert "only it can write: refusing" in got.stderr and "another remediation" not in got.stderr


def test_an_unusable_lock_directory_is_reported_as_such_not_as_held(tmp_path: Path) -> None:
    blocker = tmp_path / "notadir"
    blocker.write_text("")
    got = subprocess.run(
        ["bash", "-c", lock_script(blocker / "x.lock")], stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    assert got.returncode == LOCK_BROKEN_EXIT and "cannot create the lock directory" in got.stderr


def test_the_lock_directory_is_created_private(tmp_path: Path) -> None:
    lock = tmp_path / "run" / "remediate" / "x.lock"
    got = subprocess.run(["bash", "-c", lock_script(lock)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert lock.parent.stat().st_mode & 0o777 == 0o700


def test_the_lock_holder_keeps_the_lock_until_a_running_commit_is_done(tmp_path: Path) -> None:
    lock = tmp_path / "run" / "x.lock"
    holder = subprocess.Popen(
        ["bash", "-c", lock_script(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    commit = None
    try:
        assert holder.stdout is not None
        seen = [holder.stdout.readline() for _ in range(3)]  # @@now, @@analyze, then the lock is taken
        while seen[-1] not in ("@@locked\n", ""):
            seen.append(holder.stdout.readline())
        assert seen[-1] == "@@locked\n", seen
        # A commit script of this run holds the commit lock (as commit.sh.j2 does) while it runs.
        commit = subprocess.Popen(["flock", "-n", f"{lock}.commit", "cat"], stdin=subprocess.PIPE)
        assert holder.stdin is not None
        holder.stdin.close()  # the connection is cut
        with pytest.raises(subprocess.TimeoutExpired):
            holder.wait(timeout=1.5)
        second = subprocess.run(
            ["bash", "-c", lock_script(lock)], stdin=subprocess.DEVNULL, capture_output=True, text=True
        )
        assert second.returncode == LOCK_HELD_EXIT  # nobody else gets in mid-commit
        assert commit.stdin is not None
        commit.stdin.close()  # the commit script ends
        assert commit.wait(timeout=10) == 0
        assert holder.wait(timeout=10) == 0
    finally:
        for proc in (holder, commit):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        if holder.stdout is not None:
            holder.stdout.close()


# -- 6. exactly once: the token's claim, the holder's heartbeat, the lock taken back after our commit ------


def test_a_second_script_of_the_same_token_touches_nothing(tmp_path: Path) -> None:
    """The script sent again after a cut, while the first (late) one already claimed the token: @@duplicate,
    nothing written or backed up twice. (Before the token's claim, the second ran the commit again.)"""
    unit, env = two_files(tmp_path)
    script = rendered_many(forward(unit, env), run_dir=tmp_path / "run")
    first = run(script)
    assert first.returncode == 0, first.stdout
    unit.write_text(OLD)  # were it to run again, it would write again
    second = run(script)
    assert second.returncode == 80 and second.stdout == "@@duplicate\n", second.stdout
    assert unit.read_text() == OLD and len(list(unit.parent.glob("*.bak.*"))) == 1


def test_two_scripts_of_one_token_started_together_commit_once(tmp_path: Path) -> None:
    unit, env = two_files(tmp_path)
    script = rendered_many(forward(unit, env), run_dir=tmp_path / "run")
    procs = [
        subprocess.Popen(["bash", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outs = [p.communicate(script, timeout=60)[0] for p in procs]
    assert sorted(p.returncode for p in procs) == [0, 80], outs
    assert sum("@@renamed 0" in out for out in outs) == 1, outs
    assert len(list(unit.parent.glob("*.bak.*"))) == 1


def test_the_claim_is_the_scripts_first_act_under_the_commit_lock(tmp_path: Path) -> None:
    """The token's log is claimed (and @@started written) before main() runs anything."""
    unit, env = two_files(tmp_path)
    done = run(rendered_many(forward(unit, env), run_dir=tmp_path / "run"))
    assert done.returncode == 0
    log = (tmp_path / "run" / f"{UNIT}.commit.t0k3n.log").read_text()
    assert log.startswith("@@started\n") and log.endswith("@@end\n@@exit 0\n"), log


def held_lock(lock: Path, **args: object) -> str:
    return probe_script(lock.name.removesuffix(".lock"), lock_dir=str(lock.parent), **args)


def test_the_lock_holder_gives_up_when_its_channel_goes_silent(tmp_path: Path) -> None:
    """A half-open connection: stdin never closes and no heartbeat comes. The holder lets the lock go after
    heartbeat_timeout (before: it held it until the channel closed, hours on a half-open connection)."""
    lock = tmp_path / "run" / "x.lock"
    holder = subprocess.Popen(
        ["bash", "-c", held_lock(lock, lock_wait=1, heartbeat_timeout=1)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        assert holder.wait(timeout=20) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        assert holder.stdin is not None
        holder.stdin.close()


def test_the_lock_holder_stays_while_heartbeats_come(tmp_path: Path) -> None:
    lock = tmp_path / "run" / "x.lock"
    holder = subprocess.Popen(
        ["bash", "-c", held_lock(lock, lock_wait=1, heartbeat_timeout=2)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        while holder.stdout.readline() not in ("@@end\n", ""):
            pass
        for _ in range(6):  # 3 s of heartbeats, longer than the timeout
            holder.stdin.write("\n")
            holder.stdin.flush()
            with pytest.raises(subprocess.TimeoutExpired):
                holder.wait(timeout=0.5)
        second = subprocess.run(
            ["bash", "-c", held_lock(lock, lock_wait=0)], stdin=subprocess.DEVNULL, capture_output=True
        )
        assert second.returncode == LOCK_HELD_EXIT
        holder.stdin.close()
        assert holder.wait(timeout=10) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
        holder.stdin.close()


def test_the_lock_taken_back_waits_for_our_commit_longer_than_the_lock_wait(tmp_path: Path) -> None:
    """Reconnect behind a slow stop: our commit script still holds the commit lock for longer than the lock
    wait, and the old holder keeps the unit's lock until it is done. The lock taken back waits for the commit
    first (its own limit), then gets the unit's lock. (Before: flock -w LOCK_WAIT, exit 75, "(hold)".)"""
    lock = tmp_path / "run" / "x.lock"
    old = subprocess.Popen(
        ["bash", "-c", held_lock(lock, lock_wait=1)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    commit = None
    again = None
    try:
        assert old.stdout is not None and old.stdin is not None
        while old.stdout.readline() not in ("@@end\n", ""):
            pass
        commit = subprocess.Popen(["flock", "-n", f"{lock}.commit", "cat"], stdin=subprocess.PIPE)
        old.stdin.close()  # the cut
        again = subprocess.Popen(
            ["bash", "-c", held_lock(lock, lock_wait=1, commit_wait=30, retake=True)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        with pytest.raises(subprocess.TimeoutExpired):
            again.wait(timeout=2.5)  # longer than lock_wait: still waiting for the commit, not exit 75
        assert commit.stdin is not None
        commit.stdin.close()  # the slow stop ends, the commit script with it
        assert commit.wait(timeout=10) == 0
        assert again.stdout is not None
        seen = []
        while not seen or seen[-1] not in ("@@end\n", ""):
            seen.append(again.stdout.readline())
        assert "@@locked\n" in seen, seen
    finally:
        for proc in (old, commit, again):
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                for pipe in (proc.stdin, proc.stdout):
                    if pipe is not None:
                        pipe.close()


def test_an_alias_takes_the_lock_of_the_units_canonical_id(tmp_path: Path) -> None:
    env = shim(
        tmp_path,
        "systemctl",
        'if [ "$*" = "show -p Id --value -- llm.service" ]; then echo sglang.service; exit 0; fi\nexit 0',
    )
    lock_dir = tmp_path / "run"
    got = subprocess.run(
        ["bash", "-c", probe_script("llm.service", lock_dir=str(lock_dir), lock_wait=1)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
    )
    assert got.returncode == 0, got.stderr
    assert "@@unit sglang.service\n" in got.stdout
    assert (lock_dir / "sglang.service.lock").exists() and not (lock_dir / "llm.service.lock").exists()


def test_a_prune_through_an_alias_waits_for_the_lock_of_the_units_canonical_id(tmp_path: Path) -> None:
    """`backups --prune` names the unit as given (an Alias=); its lock is the run's all the same."""
    env = shim(
        tmp_path,
        "systemctl",
        'if [ "$*" = "show -p Id --value -- llm.service" ]; then echo sglang.service; exit 0; fi\nexit 0',
    )
    lock_dir = tmp_path / "run"
    lock_dir.mkdir(mode=0o700)
    backup = tmp_path / f"{UNIT}.bak.oom.{EPOCH}"
    backup.write_text(OLD)
    sha = hashlib.sha256(OLD.encode()).hexdigest()
    prune = templates.render(
        "prune.sh.j2",
        unit="llm.service",
        lock_dir=str(lock_dir),
        lock_wait=1,
        backups=[{"path": str(backup), "sha256": sha}],
        directory=str(tmp_path),
    )
    with open(lock_dir / "sglang.service.lock", "a") as held:  # a run on the unit holds its lock
        fcntl.flock(held, fcntl.LOCK_EX)
        refused = run(prune, env)
        assert refused.returncode == LOCK_HELD_EXIT, refused.stdout + refused.stderr
        assert backup.exists()
    done = run(prune, env)
    assert done.returncode == 0 and f"@@deleted {backup}" in done.stdout and not backup.exists()
    assert sorted(p.name for p in lock_dir.iterdir()) == ["sglang.service.lock"]
