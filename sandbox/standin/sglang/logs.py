"""sglang's log format: ``[%Y-%m-%d %H:%M:%S TP0] msg`` on stderr, flushed line by line."""

from __future__ import annotations

import sys
import threading
import time

# Reentrant, as logging's handler lock is: the SIGTERM handler logs from the main thread, which may be inside a
# write when the signal lands (a plain Lock deadlocked there until the caller's SIGKILL).
_LOCK = threading.RLock()


def _write(stream, line: str) -> None:
    with _LOCK:
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass


def _stamp(prefix: str) -> str:
    return f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{prefix}]"


def main(msg: str) -> None:
    """The main (tokenizer/HTTP) process: no rank prefix."""
    first, *rest = msg.split("\n")
    _write(sys.stderr, f"{_stamp('')} {first}")
    for line in rest:
        _write(sys.stderr, line)


def rank(tp_rank: int, msg: str) -> None:
    """A TP rank's scheduler: `` TPn`` prefix; continuation lines (tracebacks) are printed raw, in one write."""
    first, *rest = msg.split("\n")
    _write(sys.stderr, "\n".join([f"{_stamp(f' TP{tp_rank}')} {first}", *rest]))


def tp0(msg: str) -> None:
    """The rank-0 scheduler (the only rank that logs batches and the capacity line)."""
    rank(0, msg)


def ranks(order: list[int], msg_of: object) -> None:
    """The same startup step on every rank, in the order the processes happened to reach it."""
    for r in order:
        rank(r, msg_of(r))  # type: ignore[operator]


def uvicorn(msg: str, level: str = "INFO") -> None:
    _write(sys.stderr, f"{level + ':':<9} {msg}")


def access(msg: str) -> None:
    """uvicorn's access log goes to stdout."""
    _write(sys.stdout, f"INFO:     {msg}")
