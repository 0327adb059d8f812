"""`remediate watch` under chaos (issue 22; docs/WATCH.md "Chaos"): N sandbox hosts (systemd in nspawn, real
sshd, the incident's sglang unit with the stand-in), the watcher as a real subprocess (`remediate watch run`,
`--interval 0.5s`), and for ``--duration`` seconds random faults (seeded): 32k-prefill crashes, startup failures
(a neighbour process on one GPU), SSH connection cuts (the host's sshd session processes SIGKILLed by PID),
watcher restarts (SIGKILL or SIGTERM, then started again on the same state) and one burst past the breaker's
threshold. Then the watcher runs until it is quiet and is stopped, and the checker (tests/e2e/
watch_chaos_check.py) reads the audit log, watch.db, the transaction log and each host's unit bytes, backups and
server. Prints the seed, the counts by outcome, the breaker's trip against the threshold's crossing and every
violation; exit 1 when there is one. Every process started is stopped by PID; the hosts are stopped at the end.

    .venv/bin/python bench/watch_chaos.py [--seed N] [--hosts 20] [--duration 120]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # sandbox/ and tests/support/ (the drivers the tests use)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of injections")
    parser.add_argument("--interval", type=float, default=0.5, help="the watcher's --interval, seconds")
    parser.add_argument("--breaker-count", type=int, default=None, help="default: a quarter of the hosts")
    parser.add_argument("--breaker-window", type=float, default=10.0, help="seconds")
    parser.add_argument(
        "--breaker-model",
        choices=("crash_time", "any", "process", "state"),
        default="crash_time",
        help="the count the trip must match: each crash once at its own time (default), or at the round that "
        "detected it (the watcher process's window, or one kept in its state)",
    )
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--keep", type=Path, help="copy the watcher's state (audit log, watch.db) and log here")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    print(f"chaos seed {seed} (--seed {seed} replays the schedule)", flush=True)

    from sandbox import Sandbox
    from sandbox.host import free_address_block
    from tests.support.watch_chaos import Chaos, ChaosConfig, dump
    from tests.support.watch_chaos_check import check, lines

    reason = Sandbox.unavailable_reason()
    if reason:
        print(f"cannot run sandbox hosts: {reason}", file=sys.stderr)
        return 2
    config = ChaosConfig(seed=seed, duration_s=args.duration, interval_s=args.interval,
                         breaker_count=args.breaker_count or max(2, args.hosts // 4),
                         breaker_window_s=args.breaker_window, burst_at=(0.6, 0.8))  # fmt: skip
    out = args.json_out or REPO / "bench" / "results" / f"watch-chaos-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    with tempfile.TemporaryDirectory(prefix="watch-chaos-") as tmp:
        work = Path(tmp)
        fleet = Sandbox(work / "sandbox", args.hosts, first_address=free_address_block(args.hosts, 47))
        fleet.start()
        try:
            chaos = Chaos(fleet, fleet.hosts, work / "run", config)
            quiet = chaos.run()
            report = check(chaos, args.breaker_model)
            report["quiet"] = quiet
            if not quiet:
                report["violations"].append(f"the watcher did not quiet down within {config.settle_s:g}s")
            out.parent.mkdir(parents=True, exist_ok=True)
            dump(chaos, report, out)
            log = (work / "run" / "watcher.log").read_text(errors="replace")
            if args.keep:
                for name in ("watch-state", "controller-state", "watcher.log", "policy.yaml"):
                    src = work / "run" / name
                    (shutil.copytree if src.is_dir() else shutil.copy)(src, args.keep / name)
        finally:
            fleet.stop()
    print("\n".join(lines(report)))
    print(f"\nwatcher log tail:\n{log[-1500:]}\nraw: {out}")
    print(json.dumps({"seed": seed, "violations": len(report["violations"])}))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
