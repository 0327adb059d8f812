"""The retry file of a rollout: an inventory of the hosts that failed or were not attempted, usable as ``-i``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from remediate.fleet.inventory import Inventory, dump_inventory
from remediate.fleet.rollout import now_stamp
from remediate.models import HostResult


def write_retry_file(inventory: Inventory | None, results: Sequence[HostResult], directory: str = ".") -> str | None:
    """``remediate-retry-<UTC>.yaml`` holding the failed and not-attempted hosts, usable as ``-i``."""
    names = [r.host for r in results if not r.ok]
    if not names:
        return None
    inv = inventory or Inventory(path="(command line)")
    path = Path(directory).resolve() / f"remediate-retry-{now_stamp()}.yaml"
    n = 1
    while path.exists():
        path = Path(directory).resolve() / f"remediate-retry-{now_stamp()}-{n}.yaml"
        n += 1
    header = "# remediate retry file: the hosts that failed or were not attempted. Use it with -i.\n"
    path.write_text(header + dump_inventory(inv, names), encoding="utf-8")
    return str(path)
