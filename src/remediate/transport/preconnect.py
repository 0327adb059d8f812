"""The TCP connection to a host, started before paramiko is even imported (its import is ~0.3 s; the host's sshd
forks and sends its banner meanwhile). Only a proposal: the SSH transport adopts the socket only when Fabric,
which stays the authority on ssh_config, resolves the host to the same address and port with no gateway;
otherwise it is closed unused.

Where the address is not plainly known — an ssh_config with ``Match``, ``Include``, canonicalisation, a
proxy, or ``%`` tokens that apply to the host — no connection is started at all: never a packet to an
address that a careful reading of the configuration would not give.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PORT = 22
_BAIL = ("match", "include", "proxyjump", "proxycommand", "canonicalizehostname")


@dataclass(frozen=True)
class Address:
    host: str  # what Fabric's Connection.host will be (ssh_config HostName applied)
    port: int


_SETTING = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")  # paramiko's own reading of a config line


def _parse(text: str) -> list[tuple[str, str]] | None:
    """(keyword lower-cased, value) pairs of an ssh_config; None when a line cannot be read (paramiko refuses it)."""
    pairs = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SETTING.match(line)
        if match is None:
            return None
        pairs.append((match.group(1).lower(), match.group(2).strip()))
    return pairs


def _matches(patterns: list[str], target: str) -> bool:
    """paramiko's Host matching: a negated pattern that matches excludes; otherwise any match includes."""
    matched = False
    for pattern in patterns:
        if pattern.startswith("!"):
            if fnmatch.fnmatch(target, pattern[1:]):
                return False
        elif fnmatch.fnmatch(target, pattern):
            matched = True
    return matched


def resolve(target: str, port: int | None, config_files: list[Path]) -> Address | None:
    """Where ``[user@]host[:port]`` connects, read from ``config_files`` as paramiko reads them (first value
    wins; lines before any Host apply to all hosts) — or None where that is not plain (see the module)."""
    hostport = target.rsplit("@", 1)[-1]
    if hostport.count(":") > 1:
        host, given = hostport, None  # IPv6: Fabric does not split a port off it either
    else:
        host, _, rest = hostport.partition(":")
        given = int(rest) if rest.isdigit() else None
    if not host or (given is not None and port is not None):
        return None
    found: dict[str, str] = {}
    for path in config_files:
        try:
            text = path.expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        pairs = _parse(text)
        if pairs is None:
            return None
        applies = True
        for key, value in pairs:
            if key == "host":
                try:
                    applies = _matches(shlex.split(value), host)
                except ValueError:
                    return None
                continue
            if not applies:
                continue
            if key in _BAIL and value.lower() != "none" and not (key == "canonicalizehostname" and value == "no"):
                return None
            if key in ("hostname", "port"):
                found.setdefault(key, value)
    hostname = found.get("hostname", host)
    if "%" in hostname.replace("%h", ""):
        return None
    hostname = hostname.replace("%h", host)
    config_port = found.get("port", str(DEFAULT_PORT))
    if not config_port.isdigit():
        return None
    return Address(hostname, port or given or int(config_port))


@dataclass
class Preconnect:
    """A TCP connection being made on its own thread (name resolution included); :meth:`take` hands the
    connected socket over once, if it was made to ``address``; :meth:`close` drops it unused."""

    address: Address
    timeout: float
    _done: threading.Event = field(default_factory=threading.Event)
    _sock: socket.socket | None = None

    def __post_init__(self) -> None:
        threading.Thread(target=self._connect, name=f"preconnect-{self.address.host}", daemon=True).start()

    def _connect(self) -> None:
        try:
            sock = socket.create_connection((self.address.host, self.address.port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
        except OSError:
            self._sock = None  # the SSH transport connects (and reports) as it would have without this
        finally:
            self._done.set()

    def take(self, host: str, port: int) -> socket.socket | None:
        """The connected socket when it goes where Fabric resolved the host; else None (and it is closed)."""
        self._done.wait(self.timeout + 1)
        sock, self._sock = self._sock, None
        if sock is not None and Address(host, port) != self.address:
            sock.close()
            return None
        if sock is not None:
            sock.settimeout(None)
        return sock

    def close(self) -> None:
        self._done.wait(self.timeout + 1)
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
