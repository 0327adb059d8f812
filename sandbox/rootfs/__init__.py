"""The sandbox hosts' image: Debian bookworm with systemd, built once by mmdebstrap and cached by recipe hash.

``python3 -m sandbox.rootfs`` (``make rootfs``) builds it when missing and prints its path. The cache is
``$REMEDIATE_SANDBOX_CACHE`` or ``/var/cache/remediate-sandbox``; each image lives in ``<cache>/<hash>/rootfs``
where ``hash`` covers this package's recipe files (packages, customize.sh, the suite and the mirror), so
editing the recipe builds a new image (old ones stay until removed by hand: a
running sandbox of another checkout may still use one).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
MIRROR = os.environ.get("REMEDIATE_SANDBOX_MIRROR", "http://deb.debian.org/debian")
RECIPE_FILES = ("packages", "customize.sh", "__init__.py")
STAMP = ".complete"


class RootfsError(RuntimeError):
    """The image could not be built."""


def cache_root() -> Path:
    return Path(os.environ.get("REMEDIATE_SANDBOX_CACHE", "/var/cache/remediate-sandbox"))


def packages() -> list[str]:
    lines = (HERE / "packages").read_text().splitlines()
    return [word for line in lines for word in line.split("#", 1)[0].split()]


def recipe_hash() -> str:
    digest = hashlib.sha256(f"{SUITE}\n{MIRROR}\n".encode())
    for name in RECIPE_FILES:
        digest.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def image_dir() -> Path:
    """Where the image for the current recipe lives (built or not)."""
    return cache_root() / recipe_hash() / "rootfs"


def is_built() -> bool:
    return (image_dir().parent / STAMP).exists()


def build(*, quiet: bool = False) -> Path:
    """The image's path, building it first if the current recipe has none (one builder at a time)."""
    target = image_dir()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target.parent / STAMP).exists():
            return target
        if shutil.which("mmdebstrap") is None:
            raise RootfsError("mmdebstrap is missing (run sandbox/system-deps.sh)")
        staging = target.parent / "staging"
        if staging.exists():
            shutil.rmtree(staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        argv = [
            "mmdebstrap",
            "--mode=root",
            "--variant=apt",
            "--format=directory",
            "--include=" + ",".join(packages()),
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--dpkgopt=path-exclude=/usr/share/info/*",
            f'--customize-hook=cp {HERE / "customize.sh"} "$1/customize.sh"',
            '--customize-hook=chroot "$1" /bin/sh /customize.sh',
            '--customize-hook=rm "$1/customize.sh"',
            "--quiet" if quiet else "--verbose",
            SUITE,
            str(staging),
            MIRROR,
        ]
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=quiet, text=True, check=False)
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = (result.stderr or "")[-2000:] if quiet else ""
            raise RootfsError(f"mmdebstrap failed ({result.returncode}) building {target}: {tail}")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        (target.parent / STAMP).write_text(f"built in {time.monotonic() - start:.1f}s\n")
        return target


def main() -> int:
    try:
        path = build(quiet="--quiet" in sys.argv)
    except RootfsError as exc:
        print(f"sandbox rootfs: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
