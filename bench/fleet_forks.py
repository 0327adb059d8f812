"""Wall time of `remediate oom` over 12 sandbox hosts: forks 12 vs forks 1 (and the canary default).

    python bench/fleet_forks.py [HOSTS]          # default 12

Each host runs the incident's unit under the sglang stand-in (load compressed by time_scale 0.002,
so a restart + model load takes ~1 s); every run starts from the unremediated unit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import Sandbox  # noqa: E402
from sandbox.host import free_address_block  # noqa: E402
from sandbox.units import incident_unit  # noqa: E402

UNIT = "sglang.service"


def prepare(fleet: Sandbox) -> None:
    for host in fleet.hosts:
        host.reset()
        host.set_standin(time_scale=0.002)
        host.install_unit(UNIT, incident_unit(listen=host.address), start=True)


def run(fleet: Sandbox, inventory: Path, work: Path, *args: str) -> tuple[float, dict]:
    prepare(fleet)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "remediate", "oom", "all", "-i", str(inventory), "--json", *args],
        cwd=work, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"bench: remediate exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, json.loads(proc.stdout)


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 12
    with tempfile.TemporaryDirectory(prefix="remediate-bench-") as tmp:
        work = Path(tmp)
        fleet = Sandbox(work / "sandbox", n, first_address=free_address_block(n, second_octet=45))
        fleet.start()
        try:
            inventory = work / "inventory.yaml"
            inventory.write_text(
                yaml.safe_dump(
                    {
                        "defaults": {"identity": str(fleet.identity), "known_hosts": str(fleet.known_hosts)},
                        "hosts": {h.name: {"address": h.address} for h in fleet.hosts},
                    }
                )
            )
            rows = []
            for label, args in (
                (f"forks {n}, no canary", ["--forks", str(n), "--canary", "0"]),
                ("forks 1, no canary", ["--forks", "1", "--canary", "0"]),
                (f"forks {n}, canary 1 (default)", ["--forks", str(n)]),
            ):
                wall, doc = run(fleet, inventory, work, *args)
                per_host = [r["seconds"] for r in doc["results"]]
                rows.append((label, wall, sum(per_host) / len(per_host), doc["summary"]))
            print(f"{n} hosts, stand-in load ≈ 450 s × 0.002")
            print(f"{'strategy':<30} {'wall s':>7} {'mean host s':>11}  summary")
            for label, wall, mean, summary in rows:
                print(f"{label:<30} {wall:>7.2f} {mean:>11.2f}  {summary}")
        finally:
            fleet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
