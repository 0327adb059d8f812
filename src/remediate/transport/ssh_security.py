"""What the SSH transport asks of paramiko for security: algorithm preferences, the host-key policy, known_hosts.

The fastest secure key exchange and cipher paramiko offers go first (host-key verification untouched); an
unknown host key is refused, or recorded only when asked (accept-new); ``@revoked`` keys are always refused.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import paramiko
from paramiko.ssh_exception import SSHException

from remediate.transport.known_hosts import KnownHosts, read_known_hosts

NOT_KNOWN = "not found in known_hosts"
REVOKED = "is marked @revoked in known_hosts"

# Offered first, in this order, when paramiko has them (the rest follow in paramiko's own order, so a server
# that lacks these still negotiates): X25519 is the cheapest secure key exchange paramiko does, and AES-GCM
# authenticates as it encrypts (one pass, AES-NI) where AES-CTR needs a separate HMAC.
# See docs/internals/PERFORMANCE.md.
PREFERRED_KEX = ("curve25519-sha256@libssh.org", "curve25519-sha256")
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def preferred_first(preferred: tuple[str, ...], offered: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(a for a in preferred if a in offered) + tuple(a for a in offered if a not in preferred)


def fast_transport(
    sock: socket.socket | paramiko.Channel | paramiko.ProxyCommand,
    disabled_algorithms: dict[str, list[str]] | None = None,
) -> paramiko.Transport:
    """paramiko's Transport with the fastest secure algorithms offered first (SSHClient's transport_factory);
    host-key verification is untouched (the client's known_hosts and policy). ``sock`` is what paramiko's
    ``SSHClient.connect`` hands its ``transport_factory``: the TCP socket, a gateway's channel, a ProxyCommand.

    TCP_NODELAY on the socket, as OpenSSH sets it: SSH sends small messages and waits for the answer (open a
    channel, exec, EOF; each health poll), and with Nagle on each waited for the peer's delayed ACK — 40 ms
    per command round trip on Linux, 10x what the command itself cost (docs/internals/PERFORMANCE.md)."""
    no_delay(sock)
    transport = paramiko.Transport(sock, disabled_algorithms=disabled_algorithms)
    security = transport.get_security_options()
    security.kex = preferred_first(PREFERRED_KEX, tuple(security.kex))
    security.ciphers = preferred_first(PREFERRED_CIPHERS, tuple(security.ciphers))
    return transport


def no_delay(sock: object) -> None:
    """Nagle off on a TCP socket; a gateway's channel (ProxyJump) is no socket and is left alone."""
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """A key known_hosts does not list: refused (RejectPolicy's message), or with ``record`` recorded like
    ssh's accept-new. A key marked ``@revoked`` is refused whatever the policy (it is never loaded as known)."""

    def __init__(self, record: Path | None, known: KnownHosts) -> None:
        self._record = record
        self._known = known
        self._lock = threading.Lock()

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if key.get_base64() in self._known.revoked:
            raise SSHException(f"host key {key.get_name()} of {hostname} {REVOKED}")
        if self._record is None:
            raise SSHException(f"Server {hostname!r} {NOT_KNOWN}{self._known.hint()}")
        with self._lock:
            client.get_host_keys().add(hostname, key.get_name(), key)
            self._record.parent.mkdir(parents=True, exist_ok=True)
            with self._record.open("a", encoding="utf-8") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def load_keys(keys: paramiko.HostKeys, files: list[Path]) -> KnownHosts:
    """known_hosts into ``keys`` (known_hosts.py reads them, @revoked and @cert-authority understood)."""
    found = read_known_hosts(files)
    for entry in found.entries:
        try:
            key = paramiko.PKey.from_type_string(entry.key_type, entry.key)
        except (paramiko.SSHException, ValueError):
            continue  # a key type paramiko does not know, or a corrupt key: skipped as ssh would
        for name in entry.names:
            keys.add(name, key.get_name(), key)
    return found
