"""The rendered commit and lock scripts: shell-safe for hostile paths, their @@ reports parsed back correctly."""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from fake_transport import FakeTransport

from remediate.host import commit, templates
from remediate.host.commit import FileWrite
from remediate.host.lock import LOCK_HELD_EXIT

EPOCH = 1_764_400_000
UNIT = "sglang.service"
HOSTILE = "/etc/systemd/system/it's $(touch PWNED) `id` \"q.service"
SPACED = "/etc/systemd/system/my unit's.service"
OLD = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --mem-fraction-static 0.94\n"
NEW = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --mem-fraction-static 0.93\n"
REPORT = "@@reloaded\n@@restart 1764400001\n@@restarted inv-2\n@@end\n"


def rendered(path: str, *, restart: bool = True, run_dir: Path | None = None) -> str:
    return rendered_many([FileWrite(path, OLD, NEW)], restart=restart, run_dir=run_dir)


def rendered_many(writes: list[FileWrite], *, restart: bool = False, run_dir: Path | None = None) -> str:
    """The commit script for ``writes``; its lock directory (commit lock, log) under ``run_dir``."""
    run = run_dir or Path("/run/remediate")
    return templates.render(
        "commit.sh.j2",
        unit=UNIT,
        files=[w.render_args() for w in writes],
        epoch=EPOCH,
        restart=restart,
        analyze=False,
        log_path=str(run / f"{UNIT}.commit.t0k3n.log"),
        commit_lock=str(run / f"{UNIT}.lock.commit"),
    )


def sent_script(path: str) -> str:
    """The script commit.commit sends for one write of ``path`` (captured by the fake)."""
    host = FakeTransport("gpu-01").on(r"# remediate commit", f"@@backup 0 {path}.bak.oom.{EPOCH}\n" + REPORT)
    commit.commit(host, UNIT, [FileWrite(path, OLD, NEW)], epoch=EPOCH)
    [script] = host.scripts("# remediate commit")
    return script


@pytest.mark.parametrize("path", [pytest.param(HOSTILE, id="hostile"), pytest.param(SPACED, id="spaced")])
def test_commit_script_is_valid_bash(path: str) -> None:
    script = sent_script(path)
    completed = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize("path", [HOSTILE, SPACED], ids=["hostile", "spaced"])
def test_commit_script_quotes_the_path_in_commands(path: str) -> None:
    script = sent_script(path)
    assert f"paths=( {shlex.quote(path)} )\n" in script
    assert 'cp -p -- "${targets[$i]}" "$tmp"\n' in script
    assert 'mv -f -T -- "${stage[$i]}" "$t"\n' in script
    assert 'b="$p.bak.${tags[$i]}.$epoch"\n' in script and "tags=( oom )" in script


def test_commit_script_path_appears_only_shell_quoted() -> None:
    script = sent_script(HOSTILE)
    rest = script.replace(shlex.quote(HOSTILE), "")
    assert "PWNED" not in rest


needs_tools = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "flock", "sha256sum", "base64", "mktemp", "sync")),
    reason="needs bash and coreutils/util-linux",
)


def _run_locally(tmp_path: Path, name: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the rendered write-only transaction (no systemctl) on a real file in tmp_path."""
    target = tmp_path / "unit dir" / name
    target.parent.mkdir()
    target.write_text(OLD)
    target.chmod(0o640)
    script = rendered(str(target), restart=False, run_dir=tmp_path / "run")
    completed = subprocess.run(
        ["bash", "-s"], input=script, capture_output=True, text=True, cwd=tmp_path, timeout=30, check=False
    )
    return completed, target


@needs_tools
def test_commit_script_writes_and_backs_up_a_spaced_path(tmp_path: Path) -> None:
    completed, target = _run_locally(tmp_path, "my unit's.service")
    assert completed.returncode == 0, completed.stderr
    assert target.read_text() == NEW
    assert target.stat().st_mode & 0o777 == 0o640
    backup = target.with_name(f"{target.name}.bak.oom.{EPOCH}")
    assert backup.read_text() == OLD and backup.stat().st_mode & 0o777 == 0o640
    assert f"@@backup 0 {backup}\n" in completed.stdout
    assert sorted(p.name for p in target.parent.iterdir()) == sorted([target.name, backup.name])


@needs_tools
def test_commit_script_never_executes_the_path(tmp_path: Path) -> None:
    completed, target = _run_locally(tmp_path, "evil $(touch PWNED).service")
    assert completed.returncode == 0, completed.stderr
    assert target.read_text() == NEW
    assert not (tmp_path / "PWNED").exists()


def test_backup_path_with_spaces_is_parsed() -> None:
    host = FakeTransport("gpu-01").on(r"# remediate commit", f"@@backup 0 {SPACED}.bak.oom.{EPOCH}\n" + REPORT)
    report = commit.commit(host, UNIT, [FileWrite(SPACED, OLD, NEW)], epoch=EPOCH)
    assert report.backups == {SPACED: f"{SPACED}.bak.oom.{EPOCH}"}


def test_commit_report_is_parsed() -> None:
    path = "/etc/systemd/system/sglang.service"
    host = FakeTransport("gpu-01").on(
        r"# remediate commit", f"@@backup 0 {path}.bak.oom.{EPOCH}.1\n@@analyze {path}:3: warn\n" + REPORT
    )
    report = commit.commit(host, UNIT, [FileWrite(path, OLD, NEW)], epoch=EPOCH)
    assert report.backups == {path: f"{path}.bak.oom.{EPOCH}.1"}
    assert report.restart_epoch == 1764400001.0
    assert report.invocation_id == "inv-2"
    assert report.analyze == [f"{path}:3: warn"]
    [call] = host.calls
    assert call.command == "bash -s" and call.timeout is not None and call.timeout > 30


def test_commit_script_takes_no_lock() -> None:
    """The run holds the unit's lock on its own channel (lock.sh.j2); the commit must not wait for it again:
    it only takes, without waiting, the commit lock that tells the lock holder a commit is running."""
    script = sent_script("/etc/systemd/system/sglang.service")
    flocks = [line.strip() for line in script.splitlines() if "flock" in line and not line.lstrip().startswith("#")]
    assert flocks == ['if ! { exec 8>>"$commit_lock" && flock -n 8; } 2>/dev/null; then'], flocks
    assert "commit_lock=/run/remediate/sglang.service.lock.commit\n" in script


@needs_tools
def test_lock_script_holds_until_stdin_closes_and_a_second_taker_gets_lock_held_exit(tmp_path: Path) -> None:
    """templates/lock.sh.j2 for real: held while its stdin is open; another taker times out with LOCK_HELD_EXIT."""
    lock = str(tmp_path / "run" / "lock" / "remediate-sglang.service.lock")
    script = templates.render("lock.sh.j2", lock_path=lock, lock_wait=1)
    holder = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "@@locked\n"
        second = subprocess.run(["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        assert second.returncode == LOCK_HELD_EXIT
        assert "another remediation holds the lock" in second.stderr
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # remediate's channel closing
        assert holder.wait(timeout=10) == 0
        assert holder.stdout is not None
        holder.stdout.close()
    third = subprocess.run(["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert third.returncode == 0 and third.stdout == "@@locked\n"  # released: taken at once


@needs_tools
def test_prune_script_refuses_while_the_lock_is_held(tmp_path: Path) -> None:
    """prune.sh.j2 takes the same lock (the shared _flock.sh.j2 macro): held by a run, it deletes nothing."""
    lock = str(tmp_path / "remediate-sglang.service.lock")
    backup = tmp_path / "sglang.service.bak.oom.1"
    backup.write_text(OLD)
    sha = hashlib.sha256(OLD.encode()).hexdigest()
    prune = templates.render(
        "prune.sh.j2",
        lock_path=lock,
        lock_wait=1,
        backups=[{"path": str(backup), "sha256": sha}],
        directory=str(tmp_path),
    )
    holder_script = templates.render("lock.sh.j2", lock_path=lock, lock_wait=1)
    holder = subprocess.Popen(["bash", "-c", holder_script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "@@locked\n"
        refused = subprocess.run(["bash", "-s"], input=prune, capture_output=True, text=True, check=False)
        assert refused.returncode == LOCK_HELD_EXIT and backup.exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=10) == 0
        assert holder.stdout is not None
        holder.stdout.close()
    done = subprocess.run(["bash", "-s"], input=prune, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and f"@@deleted {backup}" in done.stdout and not backup.exists()
