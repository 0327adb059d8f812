"""templates/commit.sh.j2 never writes through a name another user controls: run for real as root on real
files in tmp_path (directories chowned to a stand-in service account, uid 1001).

A swap that only a winning race could make (a name replaced by a symlink between two steps of the script)
comes from a one-command shim on PATH doing the swap at exactly that moment; the sandbox e2e cells
(tests/e2e/test_faults_files.py) run the real attacker loop in a service-writable directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from remediate.core.probe import parse_probe, refuse_unsafe
from remediate.errors import EXIT_BAD_INPUT, UnsafePathError
from remediate.host.common import commit
from remediate.host.common.commit import UNSAFE_EXIT, FileWrite
from remediate.host.common.probe import probe_script
from remediate.models import CommandResult
from tests.support.hosts import commit_host
from tests.support.scripts import ENV_OLD, EPOCH, NEW, OLD, UNIT, names, rendered_many, run, shim, two_files

SERVICE_UID = 1001  # the service account: not root, owns nothing we trust

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="chowns to another uid: needs root"),
    pytest.mark.skipif(not shutil.which("bash"), reason="needs bash and coreutils"),
]


def victim(tmp_path: Path) -> tuple[Path, bytes]:
    """A root-owned file outside the unit's directories (stands for /etc/passwd)."""
    path = tmp_path / "etc" / "passwd"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    path.chmod(0o644)
    return path, path.read_bytes()


def env_write(env: Path) -> list[FileWrite]:
    return [FileWrite(str(env), ENV_OLD, "MEM=0.93\n")]


# -- the directory check: before anything is written ---------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "mode", "why"),
    [
        (SERVICE_UID, 0o755, f"is owned by uid {SERVICE_UID}, not root"),
        (0, 0o775, "is writable by group or others (mode 775)"),
        (0, 0o1777, "is writable by group or others (mode 1777)"),  # sticky is no excuse for the file's own
    ],
    ids=["service-owned", "group-writable", "sticky-world-writable"],
)
def test_a_directory_another_user_can_change_is_refused_with_nothing_written(
    tmp_path: Path, owner: int, mode: int, why: str
) -> None:
    unit, env = two_files(tmp_path)
    os.chown(env.parent, owner, 0)
    env.parent.chmod(mode)
    done = run(rendered_many([FileWrite(str(unit), OLD, NEW), *env_write(env)], run_dir=tmp_path / "run"))
    assert done.returncode == UNSAFE_EXIT, done.stdout
    assert f"@@error unsafe {env.parent} {why}: chown root:root {env.parent} && chmod go-w {env.parent}" in done.stdout
    # Refused before the first file (whose directory is fine) was backed up or written.
    assert names(unit.parent) == [UNIT] and unit.read_text() == OLD
    assert names(env.parent) == ["sglang"] and env.read_text() == ENV_OLD


def test_an_ancestor_another_user_owns_is_refused(tmp_path: Path) -> None:
    unit, env = two_files(tmp_path)
    nested = tmp_path / "opt" / "sglang" / "conf"
    nested.mkdir(parents=True)
    moved = nested / "sglang.env"
    env.rename(moved)
    os.chown(tmp_path / "opt" / "sglang", SERVICE_UID, SERVICE_UID)  # it can rename conf/ away and plant its own
    done = run(rendered_many(env_write(moved), run_dir=tmp_path / "run"))
    assert done.returncode == UNSAFE_EXIT
    assert f"@@error unsafe {tmp_path / 'opt' / 'sglang'} is owned by uid {SERVICE_UID}" in done.stdout
    assert names(nested) == ["sglang.env"]


def test_a_symlink_into_a_service_owned_directory_is_refused(tmp_path: Path) -> None:
    """The unit's own directory is root's, the link's target is not: the target is what root would write."""
    unit, _ = two_files(tmp_path)
    owned = tmp_path / "opt"
    owned.mkdir()
    real = owned / UNIT
    real.write_text(OLD)
    os.chown(owned, SERVICE_UID, SERVICE_UID)
    unit.unlink()
    unit.symlink_to(real)
    done = run(rendered_many([FileWrite(str(unit), OLD, NEW)], run_dir=tmp_path / "run"))
    assert done.returncode == UNSAFE_EXIT and f"@@error unsafe {owned} is owned by uid {SERVICE_UID}" in done.stdout
    assert real.read_text() == OLD and names(unit.parent) == [UNIT]


def test_root_owned_directories_pass_the_check(tmp_path: Path) -> None:
    unit, env = two_files(tmp_path)
    done = run(rendered_many([FileWrite(str(unit), OLD, NEW), *env_write(env)], run_dir=tmp_path / "run"))
    assert done.returncode == 0, done.stdout
    assert unit.read_text() == NEW


# -- defence in depth: a name swapped after mktemp is never written, chmod-ed or chown-ed ---------------


def swap_after_mktemp(tmp_path: Path, pattern: str, target: Path) -> dict[str, str]:
    """mktemp that creates its temp file, then (the attacker winning the race) replaces it by a symlink."""
    return shim(
        tmp_path,
        "mktemp",
        f'out=$("$REAL" "$@") || exit 1\ncase "$out" in */{pattern}.*) rm -f -- "$out"; '
        f'ln -s {target} "$out";; esac\necho "$out"',
    )


@pytest.mark.parametrize("pattern", [".remediate-backup", ".remediate"], ids=["backup", "staging"])
def test_a_temp_name_swapped_for_a_symlink_is_never_written_through(tmp_path: Path, pattern: str) -> None:
    unit, env = two_files(tmp_path)
    passwd, before = victim(tmp_path)
    os.chown(env, SERVICE_UID, SERVICE_UID)  # the file is the service account's: a chown would hand it passwd
    swapped = swap_after_mktemp(tmp_path, pattern, passwd)
    done = run(rendered_many(env_write(env), run_dir=tmp_path / "run"), swapped)
    assert done.returncode == UNSAFE_EXIT, done.stdout
    assert "was replaced after it was created: refusing to write there" in done.stdout
    assert passwd.read_bytes() == before
    assert passwd.stat().st_uid == 0 and passwd.stat().st_mode & 0o777 == 0o644
    assert env.read_text() == ENV_OLD
    assert not any(n.startswith(".remediate") for n in names(env.parent)), "the temp names are cleaned up"


# -- the controller: exit 79 before any rename is bad input (exit 2), not a failed commit ---------------


def test_an_unsafe_refusal_is_a_config_error_naming_the_directory() -> None:
    out = "@@error unsafe /opt/sglang is owned by uid 1001, not root: chown root:root /opt/sglang && ...\n"
    reply = CommandResult("bash -s", UNSAFE_EXIT, out + "@@failed safety check\n@@exit 79\n", "")
    host = commit_host(reply)
    with pytest.raises(UnsafePathError) as caught:
        commit.commit(host, UNIT, [FileWrite("/opt/sglang/sglang.env", OLD, NEW)], epoch=EPOCH)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert str(caught.value).startswith("gpu-01: refused, nothing written: /opt/sglang is owned by uid 1001")


# -- the locked read reports it first: the run is refused at plan time (--dry-run too) -------------------


def test_the_locked_read_reports_an_unsafe_directory_and_the_plan_refuses_it(tmp_path: Path) -> None:
    unit, env = two_files(tmp_path)
    os.chown(env.parent, SERVICE_UID, SERVICE_UID)
    systemctl = shim(
        tmp_path, "systemctl", f'echo "FragmentPath={unit}"\necho "EnvironmentFiles={env} (ignore_errors=no)"'
    )
    script = probe_script(UNIT, lock_dir=str(tmp_path / "run"), lock_wait=3)
    done = subprocess.run(
        ["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=systemctl, timeout=30
    )
    assert done.returncode == 0, done.stderr
    found = parse_probe(done.stdout, UNIT)
    assert found.files[str(unit)].unsafe == "" and found.files[str(unit)].text == OLD
    assert found.files[str(env)].unsafe == (
        f"{env.parent} is owned by uid {SERVICE_UID}, not root: chown root:root {env.parent} && chmod go-w "
        f"{env.parent}, or move the file to a root-owned directory"
    )
    assert found.files[str(env)].text == ENV_OLD
    refuse_unsafe(found, [str(unit)], "gpu-01")  # a write of the unit alone is fine
    with pytest.raises(UnsafePathError, match=f"^gpu-01: refused, nothing written: {env.parent} is owned by uid"):
        refuse_unsafe(found, [str(unit), str(env)], "gpu-01")
