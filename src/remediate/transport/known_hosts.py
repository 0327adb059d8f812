"""OpenSSH known_hosts files read the way ssh reads them — what paramiko's own loader cannot do.

paramiko's ``HostKeys.load`` raises ``InvalidHostKey`` on an ``@cert-authority`` line (a site with SSH
host CAs could not connect at all) and ignores ``@revoked``. Here markers are understood: ``@revoked``
keys are collected (never trusted, refused whatever the policy), ``@cert-authority`` lines are counted
(paramiko cannot verify host certificates: such hosts need their own key listed) and skipped, and a
malformed line is skipped like ssh skips it. No paramiko here: ssh.py turns the entries into keys.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class KnownHost:
    names: tuple[str, ...]  # patterns as written: plain, [host]:port, or hashed |1|…
    key_type: str
    key: bytes
    key_b64: str


@dataclass
class KnownHosts:
    entries: list[KnownHost] = field(default_factory=list)
    revoked: set[str] = field(default_factory=set)  # base64 keys marked @revoked
    authorities: int = 0  # @cert-authority lines skipped

    def hint(self) -> str:
        """Why a host may be missing although the file mentions it (appended to "not in known_hosts")."""
        if not self.authorities:
            return ""
        return (
            f" ({self.authorities} @cert-authority line(s) skipped: host certificates are not supported; "
            "list the host's own key)"
        )


def read_known_hosts(files: list[Path]) -> KnownHosts:
    """Every usable line of ``files`` (missing files skipped); revoked keys are left out of ``entries``."""
    found = KnownHosts()
    entries: list[KnownHost] = []
    for path in files:
        if not path.is_file():
            continue
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("@"):
                marker, _, rest = line.partition(" ")
                fields = rest.split()
                if marker == "@revoked" and len(fields) >= 3:
                    found.revoked.add(fields[2])
                elif marker == "@cert-authority":
                    found.authorities += 1
                continue
            fields = line.split()
            if len(fields) < 3:
                continue
            try:
                key = base64.b64decode(fields[2], validate=True)
            except (binascii.Error, ValueError):
                continue
            entries.append(KnownHost(tuple(fields[0].split(",")), fields[1], key, fields[2]))
    found.entries = [e for e in entries if e.key_b64 not in found.revoked]
    return found
