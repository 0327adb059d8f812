"""The incident's long-context sweep with `remediate bench`, before and after `remediate oom`, on one sandbox host.

    python bench/incident_sweep.py [TIME_SCALE] [PNG]

TIME_SCALE is the stand-in's wall seconds per simulated second (default 0.05; 1.0 reproduces the incident's
wall-clock numbers and takes ~4 minutes). Before the fix the sweep stops at the 32k crash; after it every
length up to 185k is measured and longer ones are skipped. PNG (default: none) receives the plot. Everything
it starts is stopped at the end (by PID).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import Sandbox  # noqa: E402
from sandbox.host import free_address_block  # noqa: E402
from sandbox.units import free_port, incident_unit, wait_http_ok  # noqa: E402

UNIT = "sglang.service"
CONTEXTS = "1400,11000,32k,46k,92k,185k,200k"  # the incident's points, its 185k, and one past the pool


def remediate(sandbox: Sandbox, cwd: str, *args: str) -> int:
    argv = [sys.executable, "-m", "remediate", *args, "--ssh-config", str(sandbox.ssh_config)]
    print("$ remediate " + " ".join(args), flush=True)
    return subprocess.run(argv, cwd=cwd, check=False).returncode


def main() -> int:
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 0.05
    png = sys.argv[2] if len(sys.argv) > 2 else None
    reason = Sandbox.unavailable_reason()
    if reason:
        print(f"incident_sweep: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="remediate-sweep-") as work:
        sandbox = Sandbox(Path(work) / "sandbox", 1, first_address=free_address_block(1))
        sandbox.start()
        try:
            host = sandbox.hosts[0]
            # the load (450 simulated s) is shortened; prefill and decode keep their simulated times
            host.set_standin(time_scale=scale, load_s=2 / scale, warmup_s=0.5 / scale)
            # its own address and a free port: other sandboxes on this machine share the network namespace
            port = free_port(host.address)
            host.install_unit(UNIT, incident_unit(host.address, port), start=True)
            if not wait_http_ok(host.address, port, deadline=120):
                raise SystemExit("incident_sweep: the stand-in did not become ready")
            print(f"\n## before the fix (time scale {scale})", flush=True)
            remediate(sandbox, work, "bench", host.name, "--contexts", "1400,11000,32k,46k")
            print("\n## remediate oom", flush=True)
            if remediate(sandbox, work, "oom", host.name, "--wait-timeout", "300") != 0:
                return 1
            print(f"\n## after the fix (time scale {scale})", flush=True)
            started = time.monotonic()
            extra = ["--plot", str(Path(png).resolve())] if png else []
            code = remediate(sandbox, work, "bench", host.name, "--contexts", CONTEXTS, *extra)
            print(f"sweep wall time {time.monotonic() - started:.1f}s", flush=True)
            return code
        finally:
            sandbox.stop()


if __name__ == "__main__":
    sys.exit(main())
