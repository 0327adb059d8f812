"""The vLLM stand-in's log lines, in vLLM's logger format. Stdlib only."""

from __future__ import annotations

import os
import sys
import threading
import time


class Log:
    """vLLM's logger format (vllm/logger.py): ``INFO 12-04 03:20:01 [file.py:N] message``; the engine core's
    lines carry ``(EngineCore_DP0 pid=N) `` (vllm/utils/__init__.py _add_prefix)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, level: str, where: str, message: str, engine: bool = False) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        prefix = f"(EngineCore_DP0 pid={os.getpid()}) " if engine else ""
        with self.lock:
            for n, line in enumerate(message.split("\n")):
                head = f"{prefix}{level} {stamp} [{where}] " if n == 0 else prefix
                sys.stderr.write(head + line + "\n")
            sys.stderr.flush()

    def traceback(self, exc_line: str, engine: bool = True) -> None:
        prefix = f"(EngineCore_DP0 pid={os.getpid()}) " if engine else ""
        with self.lock:
            sys.stderr.write(f'{prefix}Traceback (most recent call last):\n{prefix}  File "vllm/v1/engine/core.py"\n')
            sys.stderr.write(prefix + exc_line + "\n")
            sys.stderr.flush()


LOG = Log()
