"""The stand-in's log writer: a line logged from a signal handler never waits on the line it interrupted."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandbox" / "standin"))

from sglang import logs  # noqa: E402


def test_a_line_logged_while_the_same_thread_holds_the_writer_does_not_deadlock(monkeypatch) -> None:
    """What the SIGTERM handler does when the signal lands inside a write of the main thread."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)

    def interrupted_write() -> None:
        with logs._LOCK:  # the write in progress
            logs.main("Gracefully exiting... remaining number of requests 0")  # the handler's line

    writer = threading.Thread(target=interrupted_write, daemon=True)
    writer.start()
    writer.join(timeout=10)
    assert not writer.is_alive(), "the handler's line waited on the write it interrupted"
    assert out.getvalue().endswith("Gracefully exiting... remaining number of requests 0\n")
