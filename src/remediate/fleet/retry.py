"""The retry file of an inventory rollout: the hosts that failed or were not attempted, usable as ``-i``.

Only for rollouts over an inventory (one ad-hoc host needs no file, as Ansible ≥ 2.8 decided); written
into the state directory's ``retry/`` (or to ``--retry-file PATH``), and its path is printed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from remediate.errors import ConfigError
from remediate.fleet.inventory import Inventory, dump_inventory
from remediate.fleet.rollout import now_stamp
from remediate.host.state import ensure_dir, state_dir
from remediate.models import HostResult


def _target(directory: str | None, path: str | None, *, create: bool) -> Path:
    if path is not None:
        return Path(path).expanduser().resolve()
    folder = Path(directory) if directory is not None else state_dir() / "retry"
    return (ensure_dir(folder) if create else folder).resolve()


def check_retry_target(inventory: Inventory | None, directory: str | None = None, *, path: str | None = None) -> None:
    """Before any host is touched (inventory rollouts only): the retry file's directory can be created and
    written, and ``--retry-file PATH`` is a writable file or a new name in a writable directory. ConfigError
    naming the path otherwise (bad input, exit 2: nothing changed anywhere)."""
    if inventory is None:
        return
    target = _target(directory, path, create=True)
    folder = target.parent if path is not None else target
    if path is not None and target.is_dir():
        raise ConfigError("the retry file is a directory", source=str(target))
    if not folder.is_dir():
        raise ConfigError("the retry file's directory does not exist", source=str(folder))
    if not os.access(folder, os.W_OK | os.X_OK) or (
        path is not None and target.exists() and not os.access(target, os.W_OK)
    ):
        raise ConfigError("cannot write the retry file here (permissions)", source=str(target))


def write_retry_file(
    inventory: Inventory | None,
    results: Sequence[HostResult],
    directory: str | None = None,
    *,
    path: str | None = None,
) -> str | None:
    """``remediate-retry-<UTC>.yaml`` (or ``path``) holding the failed and not-attempted hosts, or None.

    Written after the hosts were changed: a file that cannot be written (a disk that filled meanwhile) is a
    warning on each of those hosts' results, never a reason to lose them."""
    names = [r.host for r in results if not r.ok]
    if not names or inventory is None:
        return None
    try:
        return _write(inventory, names, directory, path)
    except (ConfigError, OSError) as exc:
        for result in results:
            if not result.ok:
                result.warnings.append(f"retry file not written: {exc}")
        return None


def _write(inventory: Inventory, names: list[str], directory: str | None, path: str | None) -> str:
    target = _target(directory, path, create=True)
    if path is None:
        folder = target
        target = folder / f"remediate-retry-{now_stamp()}.yaml"
        n = 1
        while target.exists():
            target = folder / f"remediate-retry-{now_stamp()}-{n}.yaml"
            n += 1
    header = "# remediate retry file: the hosts that failed or were not attempted. Use it with -i.\n"
    try:
        target.write_text(header + dump_inventory(inventory, names), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the retry file: {exc.strerror}", source=str(target)) from None
    return str(target)
