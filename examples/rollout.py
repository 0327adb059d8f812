"""A scripted fleet rollout with a custom policy, using remediate's Python API.

    python examples/rollout.py -i inventory.yaml 'gpu-*' --min-pool 190000

Policy: canary first, then 25% batches, 4 hosts at once; halt the rollout as soon as any
remediated host reports a KV pool below --min-pool tokens (the fix costs ~14k tokens per 0.01 of
--mem-fraction-static; a host far below the rest deserves a human before the fleet follows).
In-flight hosts finish; the rest are reported as not attempted and land in the retry file.
"""

from __future__ import annotations

import argparse
import sys

from remediate import api
from remediate.models import HostResult


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", default=["all"])
    parser.add_argument("-i", "--inventory", default="inventory.yaml")
    parser.add_argument("--min-pool", type=int, default=190_000, help="halt below this max_total_num_tokens")
    parser.add_argument("--ssh-config", default=None)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)

    def too_small(result: HostResult) -> str | None:
        tokens = result.max_total_num_tokens
        if result.outcome == "remediated" and tokens is not None and tokens < args.min_pool:
            return f"{result.host} reports max_total_num_tokens={tokens:,} < {args.min_pool:,}"
        return None

    def progress(host: str, phase: str, detail: str) -> None:
        if phase != "waiting":
            print(f"{host:<12} {phase:<8} {detail}", file=sys.stderr)

    request = api.OomRequest(
        targets=tuple(args.targets),
        inventory=args.inventory,
        ssh=api.SSHOptions(ssh_config=args.ssh_config),
        strategy=api.StrategyArgs(canary=1, batch="25%", forks=4),
        dry_run=args.dry_run,
    )
    rollout = api.remediate_oom(request, stop_when=too_small, progress=progress)
    for r in rollout.results:
        tokens = f"{r.max_total_num_tokens:,}" if r.max_total_num_tokens is not None else "-"
        print(f"{r.host:<12} {r.outcome:<14} {tokens:>9}  {r.error or ''}")
    if rollout.halted:
        print(f"halted: {rollout.halted}")
    if rollout.retry_file:
        print(f"retry with: remediate oom -i {rollout.retry_file}")
    return api.exit_code(rollout.results)


if __name__ == "__main__":
    sys.exit(main())
