"""PURE: who serves a port, from the kernel's own words (``templates/listener.sh.j2``).

The answer on the unit's port is the new server only when the listening socket that the connection reaches
is held by one of the unit's processes: ``ss -tlne`` gives each listener's socket inode (iproute2
misc/ss.c prints ``ino:N``), ``/proc/PID/fd`` of the unit's processes gives the inodes they hold
(``socket:[N]``). A process bound to the port outside the unit (a squatter) answers ``/health`` as well as
sglang does; it is never taken for the new server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_INODE = re.compile(r"\bino:(\d+)\b")
_SOCKET = re.compile(r"^socket:\[(\d+)\]$")
_USERS = re.compile(r'\("((?:[^"\\]|\\.){0,32})",pid=(\d+),fd=\d+\)')


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket: its local address and port, and its inode."""

    address: str
    port: int
    inode: int


@dataclass(frozen=True)
class Owner:
    """The verdict on one port: ``is_ours`` when every listener the endpoint reaches is held by the unit."""

    is_ours: bool
    why: str


def parse_listeners(lines: Iterable[str]) -> tuple[Listener, ...]:
    """``ss -tlne`` lines: ``LISTEN 0 2048 127.0.0.1:30000 0.0.0.0:* ino:123 sk:… cgroup:…`` (the header line,
    without ``ino:``, is skipped)."""
    found: list[Listener] = []
    for line in lines:
        words = line.split()
        inode = _INODE.search(line)
        if len(words) < 5 or inode is None:
            continue
        address, _, port = words[3].rpartition(":")
        address = address.strip("[]").split("%", 1)[0]
        if port.isdigit():
            found.append(Listener(address, int(port), int(inode.group(1))))
    return tuple(found)


def parse_socket_inodes(lines: Iterable[str]) -> frozenset[int]:
    """``socket:[N]`` link targets from the unit's ``/proc/PID/fd``."""
    inodes = set()
    for line in lines:
        match = _SOCKET.match(line.strip())
        if match:
            inodes.add(int(match.group(1)))
    return frozenset(inodes)


def who(lines: Iterable[str]) -> str:
    """The processes ``ss -p`` names for the port, for a message (``python3 pid 4242``), never for a decision."""
    seen: list[str] = []
    for line in lines:
        for name, pid in _USERS.findall(line):
            text = f"{''.join(c if c.isprintable() else '?' for c in name)} pid {pid}"
            if text not in seen:
                seen.append(text)
    return ", ".join(seen[:4]) or "a process not shown"
