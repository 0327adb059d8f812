"""A fleet of sandbox hosts as the CLI sees it: the inventory, a rollout, `watch` over the inventory and each
host's fingerprint (what a change would move: NRestarts, InvocationID, the unit's bytes, changing systemctl calls)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sandbox import Sandbox, SandboxHost
from tests.support.faults import CHANGING
from tests.support.node import UNIT_PATH, CliRun, Node, remediate_argv, run_cli


def write_inventory(path: Path, fleet: Sandbox, hosts: list[SandboxHost]) -> Path:
    document = {
        "defaults": {
            "identity": str(fleet.identity),
            "known_hosts": str(fleet.known_hosts),
            "target_tokens": 200000,
        },
        "hosts": {h.name: {"address": h.address} for h in hosts},
        "groups": {"rack-a": [h.name for h in hosts[:6]], "rack-b": [h.name for h in hosts[6:]]},
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def remediate(*args: str, cwd: Path) -> CliRun:
    return run_cli(remediate_argv(*args), cwd=cwd, timeout=600)  # a whole fleet's rollout, not one host's run


def watch_fleet(tmp_path: Path, inventory: Path, *args: str) -> CliRun:
    state = str(tmp_path / "watch-state")
    argv = remediate_argv("watch", *args, "--state-dir", state)
    if args and args[0] == "all":
        argv += ["-i", str(inventory), "--once", "--wait-timeout", "60"]
    return run_cli(argv, cwd=tmp_path, timeout=600)


def fleet_events(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "watch-state" / "watch-audit.jsonl").read_text().splitlines()]


def fleet_fingerprint(node: Node) -> tuple[str, str, bytes, list[str]]:
    show = node.show("NRestarts", "InvocationID")
    changing = [line for line in node.audit() if line.split(" ", 1)[0] in CHANGING]
    return show["NRestarts"], show["InvocationID"], node.bytes(UNIT_PATH), changing
