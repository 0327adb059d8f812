"""The remote scripts (templates/*.sh.j2) rendered and run for real on this machine: bash, coreutils and flock on
files in tmp_path. What the commit, lock and script tests share: the files they write, the shim that makes a
tool fail half-way (a fault that cannot be made real here), the run itself."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from remediate.host.common import templates
from remediate.host.common.commit import FileWrite

EPOCH = 1_764_400_000
UNIT = "sglang.service"
OLD = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --mem-fraction-static 0.94\n"
NEW = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --mem-fraction-static 0.93\n"
ENV_OLD = "MEM=0.94\n"
ENV_NEW = "MEM=0.93\n"


def rendered_many(
    writes: list[FileWrite], *, restart: bool = False, run_dir: Path | None = None, token: str = "t0k3n"
) -> str:
    """The commit script for ``writes``; its lock directory (commit lock, log) under ``run_dir``. A commit's
    token names its log: each commit its own (an undo of the same files, say, gets another)."""
    run = run_dir or Path("/run/remediate")
    return templates.render(
        "commit.sh.j2",
        unit=UNIT,
        files=[w.render_args() for w in writes],
        epoch=EPOCH,
        restart=restart,
        analyze=False,
        log_path=str(run / f"{UNIT}.commit.{token}.log"),
        commit_lock=str(run / f"{UNIT}.lock.commit"),
    )


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def two_files(tmp_path: Path) -> tuple[Path, Path]:
    unit = tmp_path / "system" / UNIT
    env = tmp_path / "default" / "sglang"
    for path, text in ((unit, OLD), (env, ENV_OLD)):
        path.parent.mkdir(parents=True)
        path.write_text(text)
        path.chmod(0o640)
    return unit, env


def forward(unit: Path, env: Path) -> list[FileWrite]:
    return [FileWrite(str(unit), OLD, NEW), FileWrite(str(env), ENV_OLD, ENV_NEW)]


def undo_of(writes: list[FileWrite]) -> list[FileWrite]:
    return [FileWrite(w.path, w.new_text, w.old_text, backup_tag=None) for w in writes]


def shim(tmp_path: Path, tool: str, body: str) -> dict[str, str]:
    """PATH with ``tool`` replaced by a script (``$REAL`` is the real one)."""
    bindir = tmp_path / "shim"
    bindir.mkdir(exist_ok=True)
    real = shutil.which(tool)
    (bindir / tool).write_text(f"#!/bin/bash\nREAL={real}\n{body}\n")
    (bindir / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def run(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=60, env=env)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())
