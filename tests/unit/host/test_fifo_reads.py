"""Root never blocks on, nor reads past a bound through, a name the service account swapped for a FIFO, a link
to /dev/zero or a huge file (templates/_readfile.sh.j2, used by backups.sh.j2, probe.sh.j2 and prune.sh.j2).

Each template runs for real in bash on real files in tmp_path. The race (the name swapped between the type
check and the read) is won deterministically by a `stat` on PATH that runs the real one, then swaps the name
the first time it is asked about it: what an attacker looping `mv` would win sooner or later. Every run is
bounded: a script that blocks is killed (its whole process group) and the test fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from remediate.core.backups import MAX_READ_BYTES, rejected_backup
from remediate.core.probe import parse_probe
from remediate.host.common import templates
from remediate.host.common.probe import probe_script

pytestmark = pytest.mark.skipif(not shutil.which("bash") or not shutil.which("mkfifo"), reason="needs bash")

BOUND_S = 20  # a blocked open waits forever; a script that returns takes well under a second
REAL_STAT = shutil.which("stat") or "/usr/bin/stat"


def run_bounded(script: str, env: dict[str, str] | None = None) -> str:
    """Run the script in its own process group; past BOUND_S, kill the group and fail."""
    proc = subprocess.Popen(
        ["bash", "-s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(script, timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the script blocked for {BOUND_S} s (an open of a FIFO?)")
    return out


def swapping_path(tmp_path: Path, target: Path, replacement: Path) -> dict[str, str]:
    """PATH whose `stat` swaps ``replacement`` in for ``target`` right after it first stats ``target``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "stat"
    shim.write_text(
        "#!/bin/bash\n"
        f'out=$({REAL_STAT} "$@"); rc=$?\n'
        f'if [ ! -e {tmp_path}/swapped ]; then for a in "$@"; do\n'
        f'  if [ "$a" = {target} ]; then : > {tmp_path}/swapped; mv -f -T {replacement} {target}; break; fi\n'
        "done; fi\n"
        'printf "%s\\n" "$out"; exit $rc\n'
    )
    shim.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C"}


def listing(files: list[Path], env: dict[str, str] | None = None) -> str:
    return run_bounded(templates.render("backups.sh.j2", files=[str(f) for f in files]), env)


def test_the_read_bound_is_the_core_constant() -> None:
    assert f"rf_max={MAX_READ_BYTES}\n" in templates.render("backups.sh.j2", files=["/x"])


def test_a_fifo_planted_under_a_backup_name_is_listed_as_rejected_and_never_opened(tmp_path: Path) -> None:
    env = tmp_path / "sglang.env"
    env.write_text("MEM=0.93\n")
    good = tmp_path / "sglang.env.bak.oom.1764400000"
    good.write_text("MEM=0.94\n")
    fifo = tmp_path / "sglang.env.bak.oom.9999999999"
    os.mkfifo(fifo)
    out = listing([env])
    assert f"@@rejected why=type uid={os.getuid()} size=0 " in out and f"path={fifo}\n" in out
    assert out.count("@@file ") == 1 and f"path={good}\n" in out and out.endswith("@@end\n")
    flagged = rejected_backup(out.split("@@rejected ", 1)[1].split("\n", 1)[0])
    assert flagged is not None and flagged.unsafe == "not a regular file (a FIFO, a device, a directory)"


def test_a_link_to_dev_zero_and_a_huge_file_are_rejected_unread(tmp_path: Path) -> None:
    env = tmp_path / "sglang.env"
    env.write_text("MEM=0.93\n")
    (tmp_path / "sglang.env.bak.oom.9999999999").symlink_to("/dev/zero")
    huge = tmp_path / "sglang.env.bak.oom.9999999998"
    with huge.open("wb") as handle:
        handle.truncate(MAX_READ_BYTES + 1)  # sparse: no disk, a read past the bound
    out = listing([env])
    assert "@@rejected why=symlink " in out and f"why=size uid={os.getuid()} size={MAX_READ_BYTES + 1} " in out
    assert "@@file " not in out and len(out) < 4096


@pytest.mark.parametrize("swap_in", ["fifo", "dev-zero"])
def test_a_backup_swapped_after_its_check_is_rejected_without_blocking(tmp_path: Path, swap_in: str) -> None:
    env = tmp_path / "sglang.env"
    env.write_text("MEM=0.93\n")
    backup = tmp_path / "sglang.env.bak.oom.1764400000"
    backup.write_text("MEM=0.94\n")
    planted = tmp_path / "planted"
    if swap_in == "fifo":
        os.mkfifo(planted)
    else:
        planted.symlink_to("/dev/zero")
    out = listing([env], swapping_path(tmp_path, backup, planted))
    assert (tmp_path / "swapped").exists(), "the shim swapped the name between the check and the read"
    assert f"@@rejected why=swapped uid={os.getuid()} size=9 " in out and f"path={backup}\n" in out
    assert "@@file " not in out and out.endswith("@@end\n")


@pytest.mark.parametrize("swap_in", ["fifo", "file"])
def test_a_backup_swapped_and_back_during_the_read_is_rejected(tmp_path: Path, swap_in: str) -> None:
    """The same name before and after is not enough: the file was renamed away while dd opened another one
    (a FIFO; a file of the same size, which only the ctime tells apart) and renamed back, which sets its
    ctime, so the identity taken before the open no longer matches."""
    env = tmp_path / "sglang.env"
    env.write_text("MEM=0.93\n")
    backup = tmp_path / "sglang.env.bak.oom.1764400000"
    backup.write_text("MEM=0.94\n")
    fifo, aside = tmp_path / "planted", tmp_path / "aside"
    if swap_in == "fifo":
        os.mkfifo(fifo)
    else:
        fifo.write_text("EVIL=1.0\n")  # as long as the backup
    tick = tmp_path / "tick"
    tick.touch()
    while tick.stat().st_ctime_ns <= backup.stat().st_ctime_ns:  # the clock the kernel stamps ctime with moved on
        tick.touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "stat"
    shim.write_text(  # 1st stat of the name: swap the FIFO in after it; 2nd: put the file back before it
        "#!/bin/bash\n"
        f'hit=0; for a in "$@"; do [ "$a" = {backup} ] && hit=1; done\n'
        f"n=$(cat {tmp_path}/n 2>/dev/null || echo 0)\n"
        f'if [ $hit = 1 ] && [ "$n" = 1 ]; then mv -T {backup} {fifo}; mv -T {aside} {backup}; fi\n'
        f'out=$({REAL_STAT} "$@"); rc=$?\n'
        f'if [ $hit = 1 ] && [ "$n" = 0 ]; then mv -T {backup} {aside}; mv -T {fifo} {backup}; fi\n'
        f"[ $hit = 1 ] && echo $((n + 1)) > {tmp_path}/n\n"
        'printf "%s\\n" "$out"; exit $rc\n'
    )
    shim.chmod(0o755)
    out = listing([env], {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C"})
    assert (tmp_path / "n").read_text() == "2\n" and backup.read_text() == "MEM=0.94\n"
    assert f"@@rejected why=swapped uid={os.getuid()} size=9 " in out and "@@file " not in out
    assert "RVZJTD0xLjAK" not in out  # EVIL=1.0, base64


def fake_systemctl(tmp_path: Path, frag: Path, env_file: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "systemctl"
    fake.write_text(
        f"#!/bin/sh\necho 'FragmentPath={frag}'\necho 'EnvironmentFiles={env_file} (ignore_errors=no)'\n"
        "echo 'ActiveState=active'\n"
    )
    fake.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("swap_in", ["fifo", "dev-zero"])
def test_the_probe_reads_a_swapped_env_file_as_absent_without_blocking(tmp_path: Path, swap_in: str) -> None:
    """Before: `[ -f ]`, `stat`, then `sha256sum < name`: the swapped FIFO blocked the probe (under the
    unit's lock) until its deadline, /dev/zero streamed until the transport's cap."""
    frag, env_file = tmp_path / "sglang.service", tmp_path / "sglang.env"
    frag.write_text("[Service]\nExecStart=/usr/bin/python -m sglang.launch_server\n")
    env_file.write_text("MEM=0.93\n")
    planted = tmp_path / "planted"
    if swap_in == "fifo":
        os.mkfifo(planted)
    else:
        planted.symlink_to("/dev/zero")
    fake_systemctl(tmp_path, frag, env_file)
    out = run_bounded(probe_script("sglang.service"), swapping_path(tmp_path, env_file, planted))
    assert (tmp_path / "swapped").exists()
    found = parse_probe(out, "sglang.service")
    assert found.files[str(frag)].text == frag.read_text()
    assert not found.files[str(env_file)].exists and out.count("@@file ") == 2 and out.endswith("@@end\n")


def test_the_probe_reads_a_fifo_env_file_and_its_env_files_once(tmp_path: Path) -> None:
    """A FIFO from the start (no race) reads as absent; the fragment's EnvironmentFile= lines come from the
    bytes already read, not a second open by name."""
    frag, env_file, on_disk = tmp_path / "sglang.service", tmp_path / "sglang.env", tmp_path / "disk.env"
    frag.write_text(f"[Service]\nEnvironmentFile=-{on_disk}\nExecStart=/usr/bin/python -m sglang.launch_server\n")
    os.mkfifo(env_file)
    os.mkfifo(on_disk)
    bin_dir = fake_systemctl(tmp_path, frag, env_file)
    out = run_bounded(probe_script("sglang.service"), {"PATH": f"{bin_dir}:/usr/bin:/bin"})
    found = parse_probe(out, "sglang.service")
    assert not found.files[str(env_file)].exists and not found.files[str(on_disk)].exists
    assert found.files[str(frag)].exists and out.count("@@file ") == 3


def test_prune_skips_a_backup_swapped_for_a_fifo_and_never_blocks(tmp_path: Path) -> None:
    """Before: `[ ! -L ] && [ -f ]`, then `sha256sum < name`: a FIFO swapped in between blocked the prune
    (holding the unit's lock); a stat there now sees the swap and the name is skipped, nothing deleted."""
    backup = tmp_path / "sglang.service.bak.oom.1"
    backup.write_text("old\n")
    keep = tmp_path / "sglang.service.bak.oom.2"
    keep.write_text("older\n")
    planted = tmp_path / "planted"
    os.mkfifo(planted)
    prune = templates.render(
        "prune.sh.j2",
        unit="sglang.service",
        lock_dir=str(tmp_path / "lock"),
        lock_wait=1,
        backups=[
            {"path": str(backup), "sha256": hashlib.sha256(b"old\n").hexdigest()},
            {"path": str(keep), "sha256": hashlib.sha256(b"older\n").hexdigest()},
        ],
        directory=str(tmp_path),
    )
    out = run_bounded(prune, swapping_path(tmp_path, backup, planted))
    assert f"@@skipped {backup}\n" in out and f"@@deleted {keep}\n" in out and out.endswith("@@end\n")
    assert backup.is_fifo() and not keep.exists()
