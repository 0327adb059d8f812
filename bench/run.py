"""`make bench`: run every benchmark and print its table (numbers for closing notes; no asserts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    "startup.py",
    "ssh_handshake.py",
    "sandbox_bringup.py",
    "oom_phases.py",
    "fleet_forks.py",
    "vs_ansible.py",
    "scaling.py",
    "watch_cost.py",
    "watch_chaos.py",
]
ARGS = {"vs_ansible.py": ["--profile"]}  # oom, status and diagnose against Ansible, and the wall time's cuts


def main() -> int:
    worst = 0
    for name in BENCHES:
        path = HERE / name
        if not path.exists():
            continue
        print(f"\n## {name}", flush=True)
        worst = max(worst, subprocess.run([sys.executable, str(path), *ARGS.get(name, [])], check=False).returncode)
    return worst


if __name__ == "__main__":
    sys.exit(main())
