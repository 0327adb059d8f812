"""Start-up: `remediate --help`, `--version`, and `oom` from exec to its first packet, against bare Python.

    python bench/startup.py [N]      (default 10 runs each, interleaved; medians)

The first packet is the TCP SYN of the SSH connection: a local listener records when `remediate oom`
connects to it (it then closes the socket, so the run ends with a connection error; nothing is touched).
CPU is the child's own user+system time, which machine load inflates far less than wall time.
"""

from __future__ import annotations

import compileall
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "python -c pass": ["-c", "pass"],
    "remediate --version": ["-m", "remediate", "--version"],
    "remediate --help": ["-m", "remediate", "--help"],
}


def timed(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def first_packet(ssh_config: Path) -> float:
    """Seconds from exec of `remediate oom` to its connection reaching a local listener."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    argv = [sys.executable, "-m", "remediate", "oom", f"root@127.0.0.1:{port}", "--ssh-config", str(ssh_config)]
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        listener.settimeout(30)
        conn, _ = listener.accept()
        elapsed = time.monotonic() - start
        conn.close()
    finally:
        listener.close()  # its retries are refused at once
        proc.wait(timeout=60)
    return elapsed


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 10
    # As installed from a wheel (pip compiles bytecode), not as an editable tree that compiles every start.
    compileall.compile_dir(Path(__file__).resolve().parent.parent / "src", quiet=1)
    walls: dict[str, list[float]] = {case: [] for case in CASES}
    cpus: dict[str, list[float]] = {case: [] for case in CASES}
    packets: list[float] = []
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
        ssh_config = Path(tmp) / "ssh_config"
        ssh_config.write_text("")
        for _ in range(n):
            for case, args in CASES.items():
                wall, cpu = timed(args)
                walls[case].append(wall)
                cpus[case].append(cpu)
            packets.append(first_packet(ssh_config))
    print(f"{'what':<34}{'wall s':>8}{'CPU s':>8}   (medians of {n})")
    for case in CASES:
        print(f"{case:<34}{statistics.median(walls[case]):>8.3f}{statistics.median(cpus[case]):>8.3f}")
    print(f"{'remediate oom: exec → first packet':<34}{statistics.median(packets):>8.3f}{'-':>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
