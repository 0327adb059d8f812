"""The retry file of an inventory rollout: the hosts that failed or were not attempted, usable as ``-i``.

Only for rollouts over an inventory (one ad-hoc host needs no file, as Ansible ≥ 2.8 decided); written
into the state directory's ``retry/`` (or to ``--retry-file PATH``), and its path is printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from remediate.errors import ConfigError
from remediate.fleet.inventory import Inventory, dump_inventory
from remediate.fleet.rollout import now_stamp
from remediate.host.state import ensure_dir, state_dir
from remediate.models import HostResult


def write_retry_file(
    inventory: Inventory | None,
    results: Sequence[HostResult],
    directory: str | None = None,
    *,
    path: str | None = None,
) -> str | None:
    """``remediate-retry-<UTC>.yaml`` (or ``path``) holding the failed and not-attempted hosts, or None."""
    names = [r.host for r in results if not r.ok]
    if not names or inventory is None:
        return None
    if path is not None:
        target = Path(path).expanduser().resolve()
    else:
        folder = ensure_dir(Path(directory) if directory is not None else state_dir() / "retry").resolve()
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
