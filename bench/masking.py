"""Secret masking (``mask_secrets``) on long journal lines: milliseconds per line, median of N runs.

    python bench/masking.py [LENGTH ...]      (default 48000 96000: journald's LineMax and twice it)

CPU time of this process (time.process_time), which a loaded machine inflates far less than wall time.

Each shape is one line of LENGTH characters: plain log text, one long word, plain and secret assignments,
quotes without partners, a long URL userinfo, a realistic ExecStart= repeated, and secret HTTP headers.
Masking is one linear scan, so twice the length should take about twice the time.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from remediate.core.bench.sweep import mask_info  # noqa: E402
from remediate.core.unitfile.secrets import mask_secrets  # noqa: E402
from remediate.host.diagnose.diagnose import masked  # noqa: E402

EXEC = 'bash -c "HF_TOKEN=hf_x exec python3 -m sglang.launch_server --api-key sk-1 --mem-fraction-static 0.94" '
# A decode-batch line as sglang logs it (prose, numbers, no secret): the common case.
PLAIN = (
    "[2026-12-04 03:12:44 TP0] Decode batch. #running-req: 12, #token: 81234, token usage: 0.41, "
    "gen throughput (token/s): 1873.22, #queue-req: 0, "
)
SHAPES: dict[str, Callable[[int], str]] = {
    "plain log text": lambda n: (PLAIN * (n // len(PLAIN) + 1))[:n],
    "one word (a…a)": lambda n: "a" * n,
    "NAME=value pairs": lambda n: ("CUDA_HOME=/usr/local/cuda NCCL_DEBUG=INFO " * (n // 42 + 1))[:n],
    "TOKEN=TOKEN=…": lambda n: ("TOKEN=" * (n // 6 + 1))[:n],
    "A_TOKEN=x A_TOKEN=x …": lambda n: ("A_TOKEN=x " * (n // 10 + 1))[:n],
    'HF_TOKEN=x" …': lambda n: ('HF_TOKEN=x" ' * (n // 12 + 1))[:n],
    "http://u:p@@@…": lambda n: ("http://u:" + "p@" * n)[:n],
    "--api-key --api-key …": lambda n: ("--api-key " * (n // 10 + 1))[:n],
    "'api_key': 'api_key': …": lambda n: ("'api_key': " * (n // 11 + 1))[:n],  # sglang 0.5.23's dict of args
    "ExecStart= repeated": lambda n: (EXEC * (n // len(EXEC) + 1))[:n],
    "a-a-a-…(no -Token:)": lambda n: ("a-" * (n // 2 + 1))[:n],  # a header name that never ends
    "X-Api-Key: X-Api-Key: …": lambda n: ("X-Api-Key: " * (n // 11 + 1))[:n],
    "'Cookie: a=b; ' …": lambda n: ("'Cookie: a=b; " * (n // 14 + 1))[:n],  # quotes without partners
    "Authorization: token …": lambda n: ("Authorization: token " * (n // 21 + 1))[:n],
}
# The other two masking entry points: a journal line as diagnose shows it, a /server_info string in bench.
CALLERS: dict[str, tuple[Callable[[str], object], Callable[[int], str]]] = {
    "diagnose.masked(token…)": (masked, lambda n: ("token" * (n // 5 + 1))[:n]),
    "mask_info(a…a)": (lambda text: mask_info({"chat_template": text}), lambda n: "a" * n),
}
RUNS = 5


def main(argv: list[str]) -> int:
    lengths = [int(a) for a in argv[1:]] or [48000, 96000]
    print(f"{'shape':24} " + " ".join(f"{n:>10,}" for n in lengths) + "   (CPU ms per line, median of 5)")
    rows: dict[str, tuple[Callable[[str], object], Callable[[int], str]]] = {
        name: (mask_secrets, make) for name, make in SHAPES.items()
    }
    rows.update(CALLERS)
    for name, (mask, make) in rows.items():
        cells = []
        for n in lengths:
            text = make(n)
            times = []
            for _ in range(RUNS):
                start = time.process_time()
                mask(text)
                times.append((time.process_time() - start) * 1000)
            cells.append(f"{statistics.median(times):10.1f}")
        print(f"{name:24} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
