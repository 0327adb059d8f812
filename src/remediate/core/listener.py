"""PURE: who serves a port, from the kernel's own words (``templates/listener.sh.j2``).

The answer on the unit's port is the new server only when the listening socket that the connection reaches
is held by one of the unit's processes: ``ss -Htlne`` gives each listener's socket inode (iproute2
misc/ss.c prints ``ino:N``), ``/proc/PID/fd`` of the unit's processes gives the inodes they hold
(``socket:[N]``). A process bound to the port outside the unit (a squatter) answers ``/health`` as well as
sglang does; it is never taken for the new server.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_INODE = re.compile(r"\bino:(\d+)\b")
_SOCKET = re.compile(r"^socket:\[(\d+)\]$")
_USERS = re.compile(r'\("((?:[^"\\]|\\.){0,32})",pid=(\d+),fd=\d+\)')
_WILDCARDS = frozenset({"*", "0.0.0.0", "::"})


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
    """``ss -Htlne`` lines: ``LISTEN 0 2048 127.0.0.1:30000 0.0.0.0:* ino:123 sk:… cgroup:…``."""
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


def reached(listeners: Sequence[Listener], host: str) -> tuple[Listener, ...]:
    """The listeners a connection to ``host`` reaches: a socket bound to that address wins over a wildcard one
    (Linux: ``__inet_lookup_listener`` scores an exact match above INADDR_ANY); a name, not an address, may
    reach any of them."""
    try:
        wanted = str(ipaddress.ip_address(host))
    except ValueError:
        return tuple(listeners)
    exact = tuple(x for x in listeners if _canonical(x.address) == wanted)
    if exact:
        return exact
    wild = tuple(x for x in listeners if x.address in _WILDCARDS)
    return wild or tuple(listeners)


def _canonical(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def who(lines: Iterable[str]) -> str:
    """The processes ``ss -p`` names for the port, for a message (``python3 pid 4242``), never for a decision."""
    seen: list[str] = []
    for line in lines:
        for name, pid in _USERS.findall(line):
            text = f"{''.join(c if c.isprintable() else '?' for c in name)} pid {pid}"
            if text not in seen:
                seen.append(text)
    return ", ".join(seen[:4]) or "a process not shown"


def judge_owner(
    listeners: Sequence[Listener], ours: frozenset[int], endpoint: tuple[str, int], unit: str, users: str
) -> Owner:
    """Ours only when the port has a listener for the endpoint and each one it may reach is held by the unit."""
    host, port = endpoint
    serving = reached([x for x in listeners if x.port == port], host)
    if not serving:
        return Owner(False, f"nothing listens on port {port} any more")
    strangers = [x for x in serving if x.inode not in ours]
    if strangers:
        where = f"{strangers[0].address}:{strangers[0].port}"
        return Owner(False, f"{where} is held by a process outside {unit} ({users}): not our server")
    return Owner(True, f"{unit} holds {serving[0].address}:{serving[0].port}")
