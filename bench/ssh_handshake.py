"""SSH connection cost by algorithm choice: `python bench/ssh_handshake.py [N]` (default 10 connections each).

Against one sandbox host (OpenSSH), each row connects N times with remediate's SSHTransport (host key
verified), runs `true` once and closes: paramiko's default order (ML-KEM-768 + X25519 hybrid key exchange,
AES-CTR + HMAC-SHA2) versus remediate's preference (X25519, AES-GCM). Median wall and controller CPU per
connection; what was negotiated is read from the transport itself.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remediate.transport import ssh, ssh_security  # noqa: E402
from remediate.transport.base import SSHOptions  # noqa: E402
from sandbox import Sandbox  # noqa: E402
from sandbox.host import free_address_block  # noqa: E402

VARIANTS = {
    "paramiko default": ((), ()),
    "remediate": (ssh_security.PREFERRED_KEX, ssh_security.PREFERRED_CIPHERS),
    "x25519 + aes-ctr": (ssh_security.PREFERRED_KEX, ()),
}


class _Agreed(logging.Handler):
    """paramiko's debug log names the key exchange it agreed on ("Kex: …")."""

    kex = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Kex: "):
            self.kex = message[5:].strip()


AGREED = _Agreed()
logging.getLogger("paramiko.transport").addHandler(AGREED)
logging.getLogger("paramiko.transport").setLevel(logging.DEBUG)


def connect_once(fleet: Sandbox, name: str) -> tuple[float, float, str]:
    wall, cpu = time.monotonic(), time.process_time()
    transport = ssh.SSHTransport(name, SSHOptions(ssh_config=str(fleet.ssh_config)))
    try:
        transport.open()
        assert transport.run("true").ok
        t = transport._conn.client.get_transport()  # noqa: SLF001 - reading what was negotiated
        assert t is not None
        negotiated = f"{AGREED.kex} {t.local_cipher}"
    finally:
        transport.close()
    return time.monotonic() - wall, time.process_time() - cpu, negotiated


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 10
    with tempfile.TemporaryDirectory(prefix="ssh-bench-") as tmp:
        fleet = Sandbox(Path(tmp), 1, first_address=free_address_block(1, second_octet=47))
        fleet.start()
        try:
            name = fleet.hosts[0].name
            samples: dict[str, list[tuple[float, float, str]]] = {v: [] for v in VARIANTS}
            for _ in range(n):  # interleaved, so machine load hits every variant alike
                for variant, (kex, ciphers) in VARIANTS.items():
                    ssh_security.PREFERRED_KEX, ssh_security.PREFERRED_CIPHERS = kex, ciphers
                    samples[variant].append(connect_once(fleet, name))
        finally:
            fleet.stop()
    print(f"{'variant':<18}{'wall ms':>9}{'CPU ms':>8}  negotiated (median of {n})")
    for variant, rows in samples.items():
        wall = statistics.median(r[0] for r in rows) * 1000
        cpu = statistics.median(r[1] for r in rows) * 1000
        print(f"{variant:<18}{wall:>9.1f}{cpu:>8.1f}  {rows[-1][2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
