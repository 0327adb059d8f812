"""No lock outlives its run: nothing a locked script starts keeps a lock descriptor (templates/_flock.sh.j2).

A daemonless systemctl (docker-systemctl-replacement's systemctl3.py, PID 1 of many GPU containers) forks the
service from its caller, so the new server inherits every descriptor the caller had open: the commit lock (fd 8)
of templates/commit.sh.j2, the unit's lock (fd 9) of the lock holder. Here each tool the scripts run (systemctl,
journalctl, nvidia-smi, logger) is a shim that leaves a process running, as systemctl3.py leaves the service
(its standard descriptors on a log, as systemctl3.py's dup2_journal_log does; every other one inherited). After
the script: the lock is free, and no process left behind holds a descriptor of a lock file. The sandbox's
container-style host (tests/e2e/test_container_host.py) shows the same with the real systemctl3.py.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.host.common import templates
from remediate.host.common.commit import FileWrite
from remediate.host.common.probe import probe_script
from tests.support.scripts import NEW, OLD, UNIT, rendered_many

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "flock", "sha256sum", "base64", "mktemp", "sync", "setsid")),
    reason="needs bash and coreutils/util-linux",
)

# A tool that leaves a process behind, its standard descriptors on /dev/null, every other one inherited. The
# process (a sleep) lives until the test kills it, by its PID, recorded in `left`.
LEAVER = """#!/bin/bash
setsid sleep 600 </dev/null >/dev/null 2>&1 &
echo $! >> {left}
{body}
"""


@pytest.fixture
def left(tmp_path: Path) -> Iterator[Path]:
    """The file the shims record their left-behind processes in; each is killed (by PID) afterwards."""
    path = tmp_path / "left"
    path.touch()
    yield path
    for pid in {int(p) for p in path.read_text().split()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        _reap_quietly(pid)


def _reap_quietly(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass  # not our child: setsid's, reparented to init


def shims(tmp_path: Path, left: Path, bodies: dict[str, str]) -> dict[str, str]:
    bindir = tmp_path / "shim"
    bindir.mkdir(exist_ok=True)
    for tool, body in bodies.items():
        (bindir / tool).write_text(LEAVER.format(left=left, body=body))
        (bindir / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def lock_fds(pids: list[int], lock_dir: Path) -> list[str]:
    """Each descriptor of these processes that names a file in the lock directory."""
    found = []
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir():
            try:
                target = os.readlink(fd)
            except FileNotFoundError:
                continue
            if target.startswith(str(lock_dir) + "/"):
                found.append(f"{pid} fd {fd.name} -> {target}")
    return found


def left_pids(left: Path) -> list[int]:
    pids = [int(p) for p in left.read_text().split()]
    assert pids, "no shim ran: the test proves nothing"
    assert all(Path(f"/proc/{p}").exists() for p in pids)
    return pids


def is_free(lock: Path) -> bool:
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


SYSTEMCTL = 'case " $* " in *" NeedDaemonReload "*) echo NeedDaemonReload=no ;; esac\nexit 0'


def test_the_commit_lock_is_free_after_a_restart_that_leaves_the_server_running(tmp_path: Path, left: Path) -> None:
    unit = tmp_path / UNIT
    unit.write_text(OLD)
    run_dir = tmp_path / "run"
    env = shims(tmp_path, left, {"systemctl": SYSTEMCTL, "logger": "exit 0", "systemd-analyze": "exit 0"})
    script = rendered_many([FileWrite(str(unit), OLD, NEW)], restart=True, run_dir=run_dir)
    done = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and "@@end" in done.stdout, done.stdout + done.stderr
    assert unit.read_text() == NEW
    pids = left_pids(left)
    assert len(pids) >= 4  # daemon-reload, show, reset-failed, restart, show
    assert lock_fds(pids, run_dir) == []
    assert is_free(run_dir / f"{UNIT}.lock.commit")


def test_the_commit_with_analyze_and_a_journal_line_leaves_no_lock_behind(tmp_path: Path, left: Path) -> None:
    unit = tmp_path / UNIT
    unit.write_text(OLD)
    run_dir = tmp_path / "run"
    env = shims(tmp_path, left, {"systemctl": SYSTEMCTL, "logger": "exit 0", "systemd-analyze": "exit 0"})
    script = templates.render(
        "commit.sh.j2",
        unit=UNIT,
        files=[FileWrite(str(unit), OLD, NEW).render_args()],
        epoch=1,
        restart=True,
        analyze=True,
        fragment=str(unit),
        journal="remediate: a change",
        log_path=str(run_dir / f"{UNIT}.commit.t.log"),
        commit_lock=str(run_dir / f"{UNIT}.lock.commit"),
    )
    done = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and "@@end" in done.stdout, done.stdout + done.stderr
    pids = left_pids(left)
    assert len(pids) >= 6  # logger, systemd-analyze, daemon-reload, show, reset-failed, restart, show
    assert lock_fds(pids, run_dir) == []


def test_the_lock_holder_leaves_no_lock_in_what_its_read_started(tmp_path: Path, left: Path) -> None:
    """The locked read (show, journal, nvidia-smi) under the unit's lock: once its channel closes and it lets go,
    the lock is free though what it started still runs."""
    run_dir = tmp_path / "run"
    env = shims(
        tmp_path,
        left,
        {"systemctl": "exit 0", "journalctl": "exit 0", "nvidia-smi": "exit 0"},
    )
    script = probe_script(UNIT, lock_dir=str(run_dir), lock_wait=5, journal_lines=10)
    done = subprocess.run(
        ["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0 and "@@locked" in done.stdout, done.stdout + done.stderr
    pids = left_pids(left)
    assert len(pids) >= 4  # show -p Id, show, journalctl, nvidia-smi ×2
    assert lock_fds(pids, run_dir) == []
    assert is_free(run_dir / f"{UNIT}.lock")


def test_the_template_lock_leaves_no_lock_in_what_its_listing_started(tmp_path: Path, left: Path) -> None:
    run_dir = tmp_path / "run"
    env = shims(tmp_path, left, {"systemctl": "exit 0"})
    script = templates.render(
        "instances.sh.j2",
        template="sglang@.service",
        pattern="sglang@*.service",
        lock_dir=str(run_dir),
        lock_wait=5,
        heartbeat_timeout=5,
    )
    done = subprocess.run(
        ["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0 and "@@locked" in done.stdout, done.stdout + done.stderr
    assert lock_fds(left_pids(left), run_dir) == []
    assert is_free(run_dir / "sglang@.service.lock")
