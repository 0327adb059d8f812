"""`watch` on one sandbox host: a round of it, its audit log, and the incident's crash made real."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.node import CliRun, Node, poll


def watch_once(node: Node, state: Path, *args: str) -> CliRun:
    """`watch --once` of the node's host, its state in ``state``."""
    return node.cli("watch", "--once", "--state-dir", str(state), "--wait-timeout", "60", *args, json_out=False)


def watch_events(state: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (state / "watch-audit.jsonl").read_text().splitlines()]


def crash_32k(node: Node) -> None:
    """Two 2k requests served, then the 32k prefill kills the stand-in (the incident); its OOM in the journal."""
    for seed in (1, 2):
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should kill the stand-in"
    poll(
        lambda: any("torch.OutOfMemoryError: CUDA out of memory" in line for line in node.journal()),
        deadline=10,
        what="the OOM traceback in the journal",
    )
