"""Faults made real on a sandbox host for the transaction's fault matrix (tests/e2e/test_faults*.py): a one-shot shim
on the host's PATH that cuts the connection, fails or pauses a step; the promise every cell asserts (the unit is
the old or the new bytes, a complete backup whenever it changed, no temp file); the host's audit of changes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.support.node import UNIT_PATH, Node

UNIT_DIR = "/etc/systemd/system"
FIRED = "/run/fault.fired"  # the shim fires once: later calls (the undo's, a re-run's) pass through
REACHED = "/run/fault.reached"
GO = "/run/fault.go"
CHANGING = ("daemon-reload", "reset-failed", "restart", "start", "stop")

# Cut this connection: SIGKILL the sshd processes above the shim (the session that runs it) — never the
# listener, whose parent is the host's init.
CUT = r"""
pid=$PPID
while [ "$pid" -gt 1 ]; do
  next=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status")
  [ "$next" -gt 1 ] || break
  case "$(cat "/proc/$pid/comm")" in sshd*) kill -9 "$pid" ;; esac
  pid=$next
done
"""
FAIL = 'echo "{tool}: injected failure of $*" >&2; exit 1'
PAUSE = f": > {REACHED}; while [ ! -e {GO} ]; do sleep 0.02; done"


def install_shim(node: Node, tool: str, match: str, action: str) -> None:
    """/usr/local/sbin/TOOL (first on root's PATH): when its arguments match the glob ``match`` the first
    time, do ``action``; always run the tool it shadows afterwards (unless the action exits) — for systemctl
    the sandbox's auditing wrapper in /usr/local/bin."""
    real = {"systemctl": "/usr/local/bin/systemctl"}.get(tool, f"/usr/bin/{tool}")
    script = (
        "#!/bin/bash\n"
        f'case "$*" in {match.replace(" ", chr(92) + " ")})\n'
        f"  if mkdir {FIRED} 2>/dev/null; then\n{action}\n  fi ;;\nesac\n"
        f'exec {real} "$@"\n'
    )
    node.host.write(f"/usr/local/sbin/{tool}", script, mode=0o755)


def promise(node: Node, original: bytes, *, changed: bool | None = None) -> bytes:
    """The unit is the old or the new bytes; a complete backup exists whenever it changed; no temp file."""
    now = node.bytes(UNIT_PATH)
    assert now == original or is_new(original, now), f"neither the old nor the new bytes:\n{now.decode()}"
    if now != original:
        backups = node.backups(UNIT_PATH)
        assert backups and any(node.bytes(b) == original for b in backups), "the unit changed without a complete backup"
    if changed is not None:
        assert (now != original) is changed
    leftovers = [n for n in node.ls(UNIT_DIR) if n.startswith(".remediate")]
    assert leftovers == [], f"temp files left: {leftovers}"
    for b in node.backups(UNIT_PATH):
        assert node.bytes(b) == original, f"{b} is not a complete copy of the original"
    return now


def is_new(original: bytes, now: bytes) -> bool:
    text = now.decode()
    return (
        "--mem-fraction-static 0.93" in text
        and "--chunked-prefill-size 4096" in text
        and "expandable_segments:True" in text
        and len(now) > len(original)
    )


def changing(node: Node) -> list[str]:
    return [line for line in node.audit() if line.split(" ", 1)[0] in CHANGING]


def sshd_sessions(node: Node) -> list[int]:
    """The sshd processes serving connections: named sshd*, child of another sshd (not of init: the listener)."""
    pids = []
    for pid in node.host.processes():
        try:
            comm = Path(f"/proc/{pid}/comm").read_text()
            ppid = int(Path(f"/proc/{pid}/status").read_text().split("PPid:", 1)[1].split()[0])
            parent = Path(f"/proc/{ppid}/comm").read_text()
        except (OSError, IndexError, ValueError):
            continue
        if comm.startswith("sshd") and parent.startswith("sshd"):
            pids.append(pid)
    return pids


def cut_connections(node: Node) -> int:
    """SIGKILL the sshd processes of every open connection to the host (only the CLI's are open)."""
    pids = sshd_sessions(node)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def clear_markers(node: Node) -> None:
    """Remove the shim's markers (/run outlives a host's reset)."""
    node.host.run("/bin/rm", "-rf", "--", FIRED, REACHED, GO)  # /run outlives a host's reset
