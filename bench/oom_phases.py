"""Per-phase times of `remediate oom` on a sandbox host running the incident's unit.

Starts one sandbox host (needs root, like the e2e tests), installs examples/incident/sglang.service
(User=/Group= dropped, bound to the host's own address), then N times: reset the host, start the
incident server, run `remediate oom HOST --json` as a subprocess and collect the phases it reports.
Prints one table (min / median / max per phase).

    .venv/bin/python bench/oom_phases.py [--runs 5] [--time-scale 0.004]

The stand-in's load time is `450 s × time_scale` (0.004 → 1.8 s, the stand-in default); the wait
phase scales with it, the other phases are the tool's own cost (SSH, remote scripts, systemd 252's systemctl).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sandbox import Sandbox  # noqa: E402
from sandbox.host import free_address_block  # noqa: E402
from sandbox.units import free_port, incident_unit, wait_http_ok  # noqa: E402

PHASES = ("connect", "lock", "read", "plan", "commit", "wait", "verify")
UNIT_PATH = "/etc/systemd/system/sglang.service"
STANDIN = "/opt/sglang/standin"


def one_run(fleet: Sandbox, time_scale: float, workdir: Path) -> tuple[dict[str, float], float, dict]:
    host = fleet.hosts[0]
    host.reset()
    host.set_standin(time_scale=time_scale)
    port = free_port(host.address)
    host.install_unit("sglang.service", incident_unit(host.address, port))
    if not wait_http_ok(host.address, port):
        raise SystemExit(f"the incident server did not get healthy on {host.address}:{port}")
    argv = [sys.executable, "-m", "remediate", "oom", host.name, "--ssh-config", str(fleet.ssh_config)]
    argv += ["--target-tokens", "200000", "--json"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - start
    if not proc.stdout.strip():
        raise SystemExit(f"remediate printed nothing (exit {proc.returncode}):\n{proc.stderr}")
    (result,) = json.loads(proc.stdout)["results"]
    if proc.returncode != 0 or result["outcome"] != "remediated":
        raise SystemExit(f"remediation failed (exit {proc.returncode}): {result.get('error')}\n{proc.stderr}")
    host.kill_services()
    return {p["name"]: p["seconds"] for p in result["phases"]}, wall, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--time-scale", type=float, default=0.004, help="stand-in seconds per simulated second")
    parser.add_argument("--first-address", default=os.environ.get("SANDBOX_FIRST_ADDRESS"))
    args = parser.parse_args()
    reason = Sandbox.unavailable_reason()
    if reason:
        print(f"cannot run sandbox hosts: {reason}", file=sys.stderr)
        return 2
    samples: list[dict[str, float]] = []
    walls: list[float] = []
    with tempfile.TemporaryDirectory(prefix="oom-phases-") as tmp:
        fleet = Sandbox(Path(tmp) / "sandbox", 1, first_address=args.first_address or free_address_block(1, 43))
        fleet.start()
        try:
            for _ in range(args.runs):
                phases, wall, last = one_run(fleet, args.time_scale, Path(tmp))
                samples.append(phases)
                walls.append(wall)
        finally:
            fleet.stop()
    print(
        f"remediate oom on a sandbox host: {args.runs} runs, stand-in time_scale {args.time_scale} "
        f"(load {450 * args.time_scale:.1f} s), tokens {last['max_total_num_tokens']:,}"
    )
    print(f"{'phase':<10}{'min s':>9}{'median s':>10}{'max s':>9}")
    rows = [(name, [s.get(name, 0.0) for s in samples]) for name in PHASES]
    rows.append(("total", [sum(s.values()) for s in samples]))
    rows.append(("CLI wall", walls))
    for name, values in rows:
        print(f"{name:<10}{min(values):>9.3f}{statistics.median(values):>10.3f}{max(values):>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
