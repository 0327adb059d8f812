"""`remediate edit --write` on real files: written through a symlink like the remote commit, compare-and-swap
between read and write, a backup never wider than its final mode, and (as root) directories another user
can change refused with nothing written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from remediate.cli import cli
from remediate.controller import localfile
from remediate.errors import ConflictError

INCIDENT = (Path(__file__).parents[2] / "data" / "unitfile_cases" / "incident" / "before.service").read_text()
NEW = INCIDENT.replace("0.94", "0.93")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chowns to another uid: needs root")


def edit(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["edit", *map(str, args)])
    return result.exit_code, result.output


def test_a_symlinked_unit_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "srv" / "sglang.service"
    real.parent.mkdir()
    real.write_text(INCIDENT)
    real.chmod(0o640)
    link = tmp_path / "system" / "sglang.service"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(real, link.parent))
    code, out = edit(link, "--write")
    assert code == 0, out
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert "--mem-fraction-static 0.93" in real.read_text() and real.stat().st_mode & 0o777 == 0o640
    [backup] = link.parent.glob("sglang.service.bak.oom.*")  # beside the link, as the remote commit puts it
    assert not backup.is_symlink() and backup.read_text() == INCIDENT
    assert sorted(p.name for p in real.parent.iterdir()) == ["sglang.service"], "no temp file left"


def test_a_file_changed_since_it_was_read_is_not_written(tmp_path: Path) -> None:
    unit = tmp_path / "sglang.service"
    unit.write_text(INCIDENT + "# an operator's edit, saved after remediate read the file\n")
    with pytest.raises(ConflictError) as caught:
        localfile.write_atomically(unit, NEW, backup_epoch=1764400000, expected=INCIDENT)
    assert caught.value.exit_code == 1
    assert str(caught.value).startswith(f"{unit}: changed since it was read (sha256 ")
    assert unit.read_text().endswith("saved after remediate read the file\n")
    assert [p.name for p in tmp_path.iterdir()] == ["sglang.service"], "no backup, no temp file"


def test_a_backup_that_fails_half_way_never_exists_with_a_wider_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 0600 unit (it holds a token) under umask 022: the backup is 0600 from its first byte; when the
    copy fails (here: fsync, the disk full) no backup is left, let alone a world-readable one."""
    unit = tmp_path / "sglang.service"
    unit.write_text(INCIDENT)
    unit.chmod(0o600)

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)  # fault injection: a full disk cannot be made real here
    old_umask = os.umask(0o022)
    try:
        with pytest.raises(OSError, match="No space left"):
            localfile.write_atomically(unit, NEW, backup_epoch=1764400000, expected=INCIDENT)
    finally:
        os.umask(old_umask)
    leftovers = [(p.name, p.stat().st_mode & 0o777) for p in tmp_path.iterdir() if p.name != "sglang.service"]
    assert leftovers == []
    assert unit.read_text() == INCIDENT


@as_root
def test_as_root_a_directory_the_service_account_owns_is_refused(tmp_path: Path) -> None:
    owned = tmp_path / "opt-sglang"
    owned.mkdir()
    unit = owned / "sglang.service"
    unit.write_text(INCIDENT)
    os.chown(owned, 1001, 1001)
    code, out = edit(unit, "--write")
    assert code == 2
    assert out.strip() == (
        f"remediate: {unit}: {owned} is owned by uid 1001, not root: chown root:root {owned} && chmod go-w {owned}, "
        "or move the file to a root-owned directory"
    )
    assert [p.name for p in owned.iterdir()] == ["sglang.service"] and unit.read_text() == INCIDENT


@as_root
def test_as_root_a_link_into_a_group_writable_directory_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)
    real = shared / "sglang.service"
    real.write_text(INCIDENT)
    link = tmp_path / "sglang.service"
    link.symlink_to(real)
    code, out = edit(link, "--write")
    assert code == 2 and f"{shared} is writable by group or others (mode 775)" in out
    assert real.read_text() == INCIDENT and sorted(p.name for p in tmp_path.iterdir()) == ["sglang.service", "shared"]
