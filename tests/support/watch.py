"""`watch` on one sandbox host: a round of it, its audit log, and the incident's crash made real."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.node import UNIT, CliRun, Node, poll

# journald's native protocol, written from the service's own cgroup (so `journalctl -u` shows it): every field a
# client may set saying "systemd, PID 1, a stop job of the unit"; journald records the sender's real _PID.
SPOOF = (
    f"MESSAGE={UNIT}: Main process exited, code=killed, status=9/KILL\\n"
    f"SYSLOG_IDENTIFIER=systemd\\nUNIT={UNIT}\\n_PID=1\\nJOB_TYPE=stop\\n"
    "MESSAGE_ID=de5b426a63be47a7b6ac3eaac82e2f6f\\n"
)


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


def spoof_systemd_line(node: Node) -> subprocess.CompletedProcess[str]:
    """SPOOF sent to journald from a process moved into the unit's cgroup (a line the service itself writes)."""
    code = (
        "import socket, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
        f"s.sendto(b'{SPOOF}', '/run/systemd/journal/socket'); time.sleep(0.5)"
    )
    return node.host.sh(
        "for f in /sys/fs/cgroup/unified /sys/fs/cgroup/systemd /sys/fs/cgroup; do "
        f"p=$f/system.slice/{UNIT}/cgroup.procs; [ -e $p ] && echo $$ > $p; done; "
        f'exec /usr/bin/python3 -c "{code}"'
    )
