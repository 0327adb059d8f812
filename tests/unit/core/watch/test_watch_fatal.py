"""The engine's fatal lines (core/watch/fatal.py): matched where a message starts, only the unit's own lines of
its running invocation; a request quoting them is nothing, not even a wake-up."""

from __future__ import annotations

import json

import pytest

from remediate.core.watch.detect import JournalEntry, Observation, Poll
from remediate.core.watch.fatal import fatal_kind, fatal_line
from remediate.core.watch.follow import is_told

RUNNING = Observation("active", "running", "success", 0, "inv-2", 0, 100)


SGLANG = "[2026-12-05 03:12:09 TP3] "
VLLM = "(EngineCore_DP0 pid=7) ERROR 12-05 03:12:09 [core.py:710] "
CASES = [
    (SGLANG + "Scheduler hit an exception: Traceback (most recent call last):", "scheduler_exception"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB.", "cuda_oom"),
    (
        "[2026-12-05 03:12:09] SIGQUIT received. signum=3, frame=None. It usually means one child failed.",
        "child_failed",
    ),
    (VLLM + "EngineCore encountered a fatal error.", "engine_core_fatal"),
    ("[2026-12-05 03:12:09] Receive: obj=GenerateReqInput(text='Scheduler hit an exception: x')", None),
    ("INFO 12-05 03:12:09 [logger.py:41] Received request 1: prompt: 'EngineCore encountered a fatal error.'", None),
    (SGLANG + "Decode batch. #running-req: 1, CUDA out of memory. (quoted)", None),
]


@pytest.mark.parametrize(("line", "kind"), CASES)
def test_a_fatal_text_counts_only_where_a_message_starts(line: str, kind: str | None) -> None:
    assert fatal_kind(line) == kind


def _entry(message: str, invocation: str = "inv-2", *, systemd: bool = False, at: float = 10.0) -> JournalEntry:
    return JournalEntry(f"s=a;i={int(at)}", at, message, invocation, is_systemd=systemd)


def test_only_the_running_invocations_own_line() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB."
    assert fatal_line(Poll(RUNNING, (_entry(oom, "inv-1"),))) is None, "an older run's last words"
    assert fatal_line(Poll(RUNNING, (_entry(oom, systemd=True),))) is None
    down = Observation("failed", "failed", "exit-code", 0, "inv-2", 1, 0)
    assert fatal_line(Poll(down, (_entry(oom),))) is None, "a unit that exited is systemd's to tell"
    found = fatal_line(Poll(RUNNING, (_entry("hello"), _entry(oom, at=12.0))))
    assert found is not None and (found.kind, found.invocation, found.at) == ("cuda_oom", "inv-2", 12.0)


def test_a_fatal_line_wakes_the_poll_and_a_request_quoting_it_does_not() -> None:
    def line(message: str) -> bytes:
        return json.dumps({"__CURSOR": "c1", "MESSAGE": message, "_PID": "4242",
                           "_SYSTEMD_INVOCATION_ID": "inv-2"}).encode()  # fmt: skip

    assert is_told(line("[2026-12-05 03:12:09 TP3] Scheduler hit an exception: Traceback"), "sglang.service")
    assert not is_told(line("[2026-12-05] Receive: obj=GenerateReqInput(text='Scheduler hit an exception: x')"),
                       "sglang.service")  # fmt: skip
