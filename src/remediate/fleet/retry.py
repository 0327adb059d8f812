"""The retry file of an inventory rollout: the hosts that failed or were not attempted, usable as ``-i``.

Only for rollouts over an inventory (one ad-hoc host needs no file, as Ansible ≥ 2.8 decided); written
into the state directory's ``retry/`` (or to ``--retry-file PATH``, controller/retry.py), and its path is
printed.
"""

from __future__ import annotations

from collections.abc import Sequence

from remediate.controller.retry import check_retry_path, write_retry_text
from remediate.errors import ConfigError
from remediate.fleet.inventory import Inventory, dump_inventory
from remediate.models import HostResult


def check_retry_target(inventory: Inventory | None, directory: str | None = None, *, path: str | None = None) -> None:
    """Before any host is touched (inventory rollouts only): the retry file can be written there
    (ConfigError naming the path otherwise: bad input, exit 2, nothing changed anywhere)."""
    if inventory is None:
        return
    check_retry_path(directory, path=path)


def write_retry_file(
    inventory: Inventory | None,
    results: Sequence[HostResult],
    directory: str | None = None,
    *,
    path: str | None = None,
) -> str | None:
    """``remediate-retry-<UTC>.yaml`` (or ``path``) holding the failed and not-attempted hosts; None when every
    host is ok or there is no inventory. ConfigError when it cannot be written (the rollout's warning).

    A host that ran several units (``units``, host/units.py) is written with ``unit:`` naming exactly its
    failed ones (``a.service,b.service``): the retry re-runs those host+unit pairs, not its healthy units."""
    names = [r.host for r in results if not r.ok]
    if not names or inventory is None:
        return None
    units = {r.host: {"unit": failed_units(r)} for r in results if not r.ok and failed_units(r)}
    try:
        return write_retry_text(dump_inventory(inventory, names, overrides=units), directory, path=path)
    except OSError as exc:
        raise ConfigError(f"cannot write the retry file: {exc.strerror or exc}", source=path or directory) from None


def failed_units(result: HostResult) -> str:
    """The failed units of a host that ran several, as ``--unit`` takes them (comma-joined); "" otherwise."""
    return ",".join(u.unit for u in result.units if not u.ok and u.unit)
