"""The library as an operator ships it to a GPU host with no package index: wheels built from this tree (and its
dependencies' wheels for the host's CPython 3.11 on manylinux), copied to the host, installed there into a venv
offline. Built once per test session; the dependencies' wheels are cached across sessions by pyproject.toml.

Debian's python3 has no ``ensurepip`` without python3-venv (the sandbox image has python3 only, like many GPU
hosts), so the venv is made ``--without-pip`` and pip runs from its own wheel (``python pip.whl/pip install``,
which pip supports): nothing but python3 is needed on the host.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from sandbox import SandboxHost

REPO = Path(__file__).resolve().parents[2]
VENV = "/opt/remediate"  # where the host's copy lives; its bin/remediate is the command
INSIDE = "/root/wheels"
TARGET = ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp"]
TARGET += ["--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64"]


def _pip(*args: str, cwd: Path = REPO) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed (is the package index reachable?):\n{proc.stderr[-3000:]}")


def build(into: Path) -> Path:
    """``into`` filled with remediate's wheel (from this tree), its dependencies' and pip's; returns ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    _pip("wheel", "--no-deps", "-q", "-w", str(into), str(REPO))
    (wheel,) = into.glob("remediate-*.whl")
    key = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "remediate-test-wheels" / key
    if not (cache / ".complete").exists():
        partial = cache.with_name(cache.name + f".{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        _pip("download", "-q", *TARGET, "-d", str(partial), str(wheel), "pip")
        for own in partial.glob("remediate-*.whl"):
            own.unlink()
        (partial / ".complete").touch()
        shutil.rmtree(cache, ignore_errors=True)
        partial.rename(cache)
    for dep in cache.glob("*.whl"):
        shutil.copy2(dep, into / dep.name)
    return into


def install(host: SandboxHost, wheels: Path, *, extra: str = "") -> None:
    """Copy the wheels onto ``host`` and install remediate into :data:`VENV`, offline, as root (setup: not over
    SSH; the test's own steps are). ``extra``: more requirement names to install from the same wheels.

    The first install of a session (per wheel set and ``extra``) is pip's, from the wheels, on the host; its
    result is kept beside the wheels, and every later install copies that tree into :data:`VENV` (the same
    bytes pip wrote, in a second instead of pip's ~15 s per host)."""
    done = _installed_copy(wheels, extra)
    if done.is_dir():
        target = host.path(VENV)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(done, target, symlinks=True)
        return
    target = host.path(INSIDE)
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(wheels, target)
    (pip,) = [p.name for p in wheels.glob("pip-*.whl")]
    script = (
        f"set -e; python3 -m venv --without-pip {VENV}\n"
        f"{VENV}/bin/python {INSIDE}/{pip}/pip install -q --no-index --find-links {INSIDE} remediate {extra}\n"
    )
    result = host.run("/bin/bash", "-c", script, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"install on {host.name} failed:\n{result.stdout}\n{result.stderr}")
    partial = done.with_name(done.name + f".{os.getpid()}.{host.name}")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(host.path(VENV), partial, symlinks=True)
    try:
        partial.rename(done)  # atomic: another thread's copy may have landed first (then ours goes)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)


def _installed_copy(wheels: Path, extra: str) -> Path:
    """Where the session keeps the venv pip installed from ``wheels`` (with ``extra``)."""
    return wheels.parent / f"{wheels.name}.venv-{hashlib.sha256(extra.encode()).hexdigest()[:12]}"


def ssh(ssh_config: Path, host: SandboxHost, command: str, *, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``command`` run on ``host`` through OpenSSH with the sandbox's ssh_config (host keys checked)."""
    argv = ["ssh", "-F", str(ssh_config), host.name, "--", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def remediate_over_ssh(ssh_config: Path, host: SandboxHost, *args: str) -> subprocess.CompletedProcess[str]:
    """``ssh HOST /opt/remediate/bin/remediate ARGS`` (the operator's ``ssh host remediate oom --local``)."""
    return ssh(ssh_config, host, shlex.join([f"{VENV}/bin/remediate", *args]))
