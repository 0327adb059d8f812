"""The rendered commit and lock scripts: shell-safe for hostile paths, their @@ reports parsed back correctly."""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from remediate.core.probe import parse_probe
from remediate.host.common import commit, templates
from remediate.host.common.commit import FileWrite
from remediate.host.common.lock import LOCK_HELD_EXIT, lock_path
from remediate.host.common.probe import probe_script
from tests.support.hosts import commit_host
from tests.support.scripts import EPOCH, NEW, OLD, UNIT, rendered_many

HOSTILE = "/etc/systemd/system/it's $(touch PWNED) `id` \"q.service"
SPACED = "/etc/systemd/system/my unit's.service"
REPORT = "@@reloaded\n@@restart 1764400001\n@@restarted inv-2\n@@end\n"


def rendered(path: str, *, restart: bool = True, run_dir: Path | None = None) -> str:
    return rendered_many([FileWrite(path, OLD, NEW)], restart=restart, run_dir=run_dir)


def sent_script(path: str) -> str:
    """The script commit.commit sends for one write of ``path`` (captured by the fake)."""
    host = commit_host(f"@@backup 0 {path}.bak.oom.{EPOCH}\n" + REPORT)
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
    assert 'cat -- "${targets[$i]}" >&"$fd"\n' in script
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
    host = commit_host(f"@@backup 0 {SPACED}.bak.oom.{EPOCH}\n" + REPORT)
    report = commit.commit(host, UNIT, [FileWrite(SPACED, OLD, NEW)], epoch=EPOCH)
    assert report.backups == {SPACED: f"{SPACED}.bak.oom.{EPOCH}"}


def test_commit_report_is_parsed() -> None:
    path = "/etc/systemd/system/sglang.service"
    host = commit_host(f"@@backup 0 {path}.bak.oom.{EPOCH}.1\n@@analyze {path}:3: warn\n" + REPORT)
    report = commit.commit(host, UNIT, [FileWrite(path, OLD, NEW)], epoch=EPOCH)
    assert report.backups == {path: f"{path}.bak.oom.{EPOCH}.1"}
    assert report.restart_epoch == 1764400001.0
    assert report.invocation_id == "inv-2"
    assert report.analyze == [f"{path}:3: warn"]
    [call] = host.calls
    assert call.command == "bash -s" and call.timeout is not None and call.timeout > 30


def test_commit_script_takes_no_lock() -> None:
    """The run holds the unit's lock on its own channel (the locked probe.sh.j2); the commit must not wait for
    it again: it only takes the commit lock that tells the lock holder a commit is running (waiting only for
    another script of its own token, sent again after a cut)."""
    script = sent_script("/etc/systemd/system/sglang.service")
    flocks = [line.strip() for line in script.splitlines() if "flock" in line and not line.lstrip().startswith("#")]
    assert flocks == ['if ! { exec 8>>"$commit_lock" && flock -w "$commit_wait" 8; } 2>/dev/null; then'], flocks
    assert "commit_lock=/run/remediate/sglang.service.lock.commit\n" in script


def _locked_probe(lock_dir: Path) -> str:
    return probe_script("sglang.service", lock_dir=str(lock_dir), lock_wait=1)


def _read_until_end(holder: subprocess.Popen[str]) -> list[str]:
    assert holder.stdout is not None
    lines: list[str] = []
    while not lines or lines[-1] != "@@end":
        line = holder.stdout.readline()
        assert line, lines  # the script ended before its read was complete
        lines.append(line.rstrip("\n"))
    return lines


@needs_tools
def test_locked_probe_holds_until_stdin_closes_and_a_second_taker_gets_lock_held_exit(tmp_path: Path) -> None:
    """probe.sh.j2 with lock_wait, for real: the lock is taken before the read (detection, lock and read in
    one round trip), kept while stdin is open, and another taker times out with LOCK_HELD_EXIT."""
    lock_dir = tmp_path / "run" / "lock"
    script = _locked_probe(lock_dir)
    holder = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        lines = _read_until_end(holder)
        assert lines.index("@@locked") < lines.index("@@unit sglang.service") < lines.index("@@show")
        # The lock the script took is the one remediate.host.common.lock names for the unit.
        assert (lock_dir / Path(lock_path("sglang.service")).name).exists()
        second = subprocess.run(["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        assert second.returncode == LOCK_HELD_EXIT
        assert "another remediation holds the lock" in second.stderr
        assert "@@show" not in second.stdout  # nothing read without the lock
        assert holder.poll() is None  # still holding: stdin is open
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # remediate's channel closing
        assert holder.wait(timeout=10) == 0
        assert holder.stdout is not None
        holder.stdout.close()
    third = subprocess.run(["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert third.returncode == 0 and "@@locked\n" in third.stdout  # released: taken at once


@needs_tools
def test_prune_script_refuses_while_the_lock_is_held(tmp_path: Path) -> None:
    """prune.sh.j2 takes the same lock (the shared _flock.sh.j2 macro): held by a run, it deletes nothing."""
    backup = tmp_path / "sglang.service.bak.oom.1"
    backup.write_text(OLD)
    sha = hashlib.sha256(OLD.encode()).hexdigest()
    prune = templates.render(
        "prune.sh.j2",
        unit="sglang.service",
        lock_dir=str(tmp_path),
        lock_wait=1,
        backups=[{"path": str(backup), "sha256": sha}],
        directory=str(tmp_path),
    )
    holder = subprocess.Popen(
        ["bash", "-c", _locked_probe(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert "@@locked" in _read_until_end(holder)
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


def test_probe_asks_systemctl_once() -> None:
    """The paths to read (fragment, drop-ins, environment files) come from the one `systemctl show` (the
    locked read asks once more, before the lock, for the unit's canonical Id that keys the lock)."""
    script = probe_script("sglang.service", lock_dir="/run/lock", lock_wait=1)
    calls = re.findall(r"^\s*[^#\n]*\bsystemctl\b.*$", script, re.MULTILINE)
    # Detection (no unit given) lists a template's instances; with a unit that branch never runs.
    calls = [c for c in calls if "list-units" not in c]
    # A daemonless systemctl's name (`--version`) is asked only where show printed no FragmentPath=.
    calls = [c for c in calls if "systemctl --version" not in c]
    assert len(calls) == 2 and "-p Id --value" in calls[0], calls


@needs_tools
def test_probe_reads_every_file_its_one_systemctl_show_names(tmp_path: Path) -> None:
    """For real, with a `systemctl` that prints what systemd would: the fragment, the drop-in, the loaded
    environment files (ignore_errors suffixes stripped) and those only on disk are all read."""
    frag, dropin = tmp_path / "sglang.service", tmp_path / "sglang.service.d" / "10-env.conf"
    loaded, on_disk = tmp_path / "loaded.env", tmp_path / "disk.env"
    dropin.parent.mkdir()
    frag.write_text(f"[Service]\nEnvironmentFile=-{on_disk}\nExecStart=/usr/bin/python -m sglang.launch_server\n")
    dropin.write_text("[Service]\nEnvironment=A=1\n")
    loaded.write_text("B=2\n")
    on_disk.write_text("C=3\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text(
        "#!/bin/sh\n"
        f"echo 'FragmentPath={frag}'\necho 'DropInPaths={dropin}'\n"
        f"echo 'EnvironmentFiles={loaded} (ignore_errors=no)'\n"
        f"echo 'EnvironmentFiles={tmp_path}/gone.env (ignore_errors=yes)'\n"
        "echo 'ActiveState=active'\n"
    )
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(
        ["bash", "-s"], input=probe_script("sglang.service"), capture_output=True, text=True, env=env, check=True
    )
    found = parse_probe(done.stdout, "sglang.service")
    assert found.state is not None and found.state.fragment_path == str(frag)
    assert found.state.active_state == "active"
    assert set(found.files) == {str(frag), str(dropin), str(loaded), str(on_disk), f"{tmp_path}/gone.env"}
    assert found.files[str(loaded)].text == "B=2\n" and not found.files[f"{tmp_path}/gone.env"].exists
    assert done.stdout.count("@@file ") == 5  # each once


def test_the_state_after_the_restart_is_parsed_for_the_health_wait() -> None:
    state = "@@state ActiveState=active\n@@state MainPID=4242\n@@state Environment=A=b=c\n"
    host = commit_host(REPORT.replace("@@end\n", state + "@@end\n"))
    report = commit.commit(host, UNIT, [FileWrite("/etc/systemd/system/x.service", OLD, NEW)], epoch=EPOCH)
    assert report.invocation_id == "inv-2"
    assert report.state == {"ActiveState": "active", "MainPID": "4242", "Environment": "A=b=c"}
