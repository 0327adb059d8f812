"""Issue 24: templates/commit.sh.j2 creates a file that did not exist (a template instance's drop-in, its
directory made 0755 when missing) and its undo removes it; run for real (bash, coreutils) in tmp_path."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from remediate.host.common.commit import FileWrite
from tests.support.scripts import rendered_many

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "flock", "sha256sum", "base64", "mktemp", "sync", "readlink")),
    reason="needs bash and coreutils/util-linux",
)

DROPIN = "[Service]\nExecStart=\nExecStart=/opt/venv/bin/python3 -m sglang.launch_server --port 300%i\n"


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=60)


def dropin(tmp_path: Path) -> Path:
    system = tmp_path / "system"
    system.mkdir(mode=0o755)
    system.chmod(0o755)
    return system / "sglang@a.service.d" / "90-remediate-oom.conf"


def test_created_with_its_directory_then_removed_by_the_undo(tmp_path: Path) -> None:
    path = dropin(tmp_path)
    create = FileWrite(str(path), "", DROPIN, old_absent=True)
    done = run(rendered_many([create], run_dir=tmp_path / "run"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert path.read_text() == DROPIN
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o755"
    assert sorted(p.name for p in path.parent.iterdir()) == ["90-remediate-oom.conf"]  # no backup of nothing
    again = run(rendered_many([create], run_dir=tmp_path / "run", token="again"))
    assert again.returncode == 0 and "@@already 0" in again.stdout
    undo = FileWrite(str(path), DROPIN, "", backup_tag=None, new_absent=True)
    gone = run(rendered_many([undo], run_dir=tmp_path / "run", token="undo"))
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not path.exists() and "@@written 0 absent" in gone.stdout
    twice = run(rendered_many([undo], run_dir=tmp_path / "run", token="undo2"))
    assert twice.returncode == 0 and "@@already 0" in twice.stdout


def test_a_file_already_there_is_a_conflict_and_untouched(tmp_path: Path) -> None:
    path = dropin(tmp_path)
    path.parent.mkdir(mode=0o755)
    path.write_text("[Service]\nEnvironment=X=1\n")
    done = run(rendered_many([FileWrite(str(path), "", DROPIN, old_absent=True)], run_dir=tmp_path / "run"))
    assert done.returncode == 76
    assert f"@@error conflict {path} exists" in done.stdout
    assert path.read_text() == "[Service]\nEnvironment=X=1\n"


def test_a_parent_others_can_write_is_refused_before_the_directory_is_made(tmp_path: Path) -> None:
    path = dropin(tmp_path)
    path.parent.parent.chmod(0o777)
    done = run(rendered_many([FileWrite(str(path), "", DROPIN, old_absent=True)], run_dir=tmp_path / "run"))
    assert done.returncode == 79 and "is writable by group or others" in done.stdout
    assert not path.parent.exists()


def test_a_created_file_state_is_described_in_words() -> None:
    from remediate.host.common.commit import _describe

    create = FileWrite("/d/90-remediate-oom.conf", "", DROPIN, old_absent=True)
    assert _describe([create], {create.path: "-"}) == f"{create.path} has no bytes (absent, as before)"
    undo = FileWrite(create.path, DROPIN, "", backup_tag=None, new_absent=True)
    assert _describe([undo], {create.path: "-"}) == f"{create.path} has no bytes (absent, as planned)"
