"""A name that looks like a backup but is not root's regular file (a planted symlink to /etc/shadow, a file
the service account wrote) is listed with the reason and never read, restored, counted or pruned.

templates/backups.sh.j2 runs for real as root on real files in tmp_path; the choice is core/backups.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from remediate.core.backups import choose, make_backup, rejected_backup, select_prune
from remediate.errors import EXIT_BAD_INPUT, UnsafePathError
from remediate.host.common import templates

UNIT = "/etc/systemd/system/sglang.service"
SECRET = "root:$6$hash-of-the-root-password:19000:0:99999:7:::\n"


def run_listing(files: list[Path]) -> str:
    script = templates.render("backups.sh.j2", files=[str(f) for f in files])
    done = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("bash"), reason="chowns to another uid: needs root")
def test_the_listing_flags_links_and_foreign_files_and_never_reads_them(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET)
    env = tmp_path / "sglang.env"
    env.write_text("MEM=0.93\n")
    good = tmp_path / "sglang.env.bak.oom.1764400000"
    good.write_text("MEM=0.94\n")
    (tmp_path / "sglang.env.bak.oom.9999999999").symlink_to(shadow)
    planted = tmp_path / "sglang.env.bak.oom.9999999998"
    planted.write_text(SECRET)
    os.chown(planted, 1001, 1001)
    os.link(shadow, tmp_path / "sglang.env.bak.oom.9999999997")  # a second name of a file that is not ours
    out = run_listing([env])
    assert f"@@rejected why=symlink uid=0 size={len(str(shadow))} " in out
    assert f"path={tmp_path}/sglang.env.bak.oom.9999999999\n" in out
    assert f"@@rejected why=owner uid=1001 size={len(SECRET)} " in out
    assert "@@rejected why=links links=2 uid=0" in out and "sglang.env.bak.oom.9999999997\n" in out
    assert out.count("@@file ") == 1 and f"path={good}\n" in out
    assert "hash-of-the-root-password" not in out and "cm9vdDokNiRoYXNo" not in out  # not even base64


def test_latest_ignores_a_planted_newer_symlink_and_to_path_refuses_it() -> None:
    real = make_backup(f"{UNIT}.bak.oom.1764400000", text="x\n", sha256="a", size=2, mtime=0)
    link = rejected_backup(f"why=symlink uid=0 size=11 mtime=1 path={UNIT}.bak.oom.9999999999")
    foreign = rejected_backup(f"why=owner uid=1001 size=3 mtime=1 path={UNIT}.bak.oom.9999999998")
    assert real is not None and link is not None and foreign is not None
    assert link.unsafe == "a symlink" and foreign.unsafe == "owned by uid 1001, not root"
    listed = [link, foreign, real]
    assert choose(listed, "latest") == [real]
    with pytest.raises(UnsafePathError) as caught:
        choose(listed, link.path)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert str(caught.value) == f"{link.path} is a symlink: not a backup remediate wrote, refusing it" + (
        " (remove it, or restore by hand)"
    )
    # Neither counted as one of the kept nor deleted: with keep=1 the real backup is the one kept.
    assert select_prune(listed, 1, {UNIT: "current"}) == []
