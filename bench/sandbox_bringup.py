"""Bring-up time and memory of sandbox hosts (systemd 252 booted in nspawn, until `is-system-running` says
`running` and sshd answers): `python bench/sandbox_bringup.py [N …]` (default 1 12 20). PSS shares the image's
pages fairly between hosts; RSS counts them once per process."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox import Sandbox  # noqa: E402
from sandbox.host import free_address_block  # noqa: E402


def measure(n_hosts: int, first_address: str) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        fleet = Sandbox(Path(tmp), n_hosts, first_address=first_address)
        started = time.monotonic()
        fleet.start()
        up = time.monotonic() - started
        try:
            fleet.wait_idle()
            rss_mib = fleet.rss_kib() / 1024
            pss_mib = fleet.pss_kib() / 1024
        finally:
            started = time.monotonic()
            fleet.stop()
            down = time.monotonic() - started
        return up, rss_mib, pss_mib, down


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv[1:]] or [1, 12, 20]
    print(f"{'hosts':>5}  {'bring-up s':>10}  {'per host s':>10}  {'RSS MiB/h':>9}  {'PSS MiB/h':>9}  {'stop s':>6}")
    for n in sizes:
        up, rss, pss, down = measure(n, free_address_block(n, second_octet=44))
        print(f"{n:>5}  {up:>10.3f}  {up / n:>10.3f}  {rss / n:>9.1f}  {pss / n:>9.1f}  {down:>6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
