"""The server's own fatal lines, pure: what lets the watcher act on a crash before systemd sees an exit.

sglang ≥ 0.5.23 at TP > 1 lingers about a minute after a scheduler rank dies (managers/tokenizer_manager.py
``running_phase_sigquit_handler`` → ``dump_requests_before_crash``: a 5 s settle, py-spy and CUDA coredumps
of the live ranks, then ``SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS``, 60 by default, srt/environ.py) with
its unit ``active`` and its event loop, hence its HTTP server, blocked. Its fatal lines come at once:

- sglang managers/scheduler.py ``run_scheduler_process``: ``Scheduler hit an exception: Traceback …`` (the
  overlap thread's ``TpModelWorkerClient hit an exception``, the detokenizer's ``DetokenizerManager hit an
  exception``), then the traceback's last line, e.g. torch's ``torch.OutOfMemoryError: CUDA out of memory.``;
  the main process's ``SIGQUIT received. signum=3, … It usually means one child failed.`` (0.4.x: ``Received
  sigquit from a child process``);
- vLLM v1/engine/core.py ``EngineCore.run_engine_core``: ``EngineCore encountered a fatal error.``.

Such a line is matched only where a message starts (core/logline.py ``at_message``: a request or prompt
that the server logs, with ``--log-requests``, stands in the middle of its line and is never evidence), only
from the unit's own processes (never systemd's) and only of the unit's *current* invocation (journald's
trusted ``_SYSTEMD_INVOCATION_ID``): an older run's last words are not this run's crash. Even so a line is
words the server wrote, which a request could shape: it is a *suspicion*, never a crash on its own. The
watcher confirms it with what the server cannot forge (fleet/watch/poll.py: its health endpoint silent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from remediate.core.engines.vllm.logline import vllm_message
from remediate.core.logline import at_message
from remediate.core.watch.detect import JournalEntry, Poll

_FATAL = (
    ("scheduler_exception", re.compile(r"(?:Scheduler|TpModelWorkerClient|DetokenizerManager) hit an exception: ")),
    ("cuda_oom", re.compile(r"CUDA out of memory\.")),  # after "torch.OutOfMemoryError: " (at_message's lead)
    ("child_failed", re.compile(r"SIGQUIT received\. signum=3\b|Received sigquit from a child process\.")),
    ("engine_core_fatal", re.compile(r"EngineCore encountered a fatal error\.")),
)


@dataclass(frozen=True)
class Fatal:
    """A fatal line of the unit's current invocation: which text, the invocation, when (host clock)."""

    kind: str
    invocation: str
    at: float
    message: str


def fatal_kind(message: str) -> str | None:
    """The fatal text ``message`` starts with (after the engine's prefixes and an exception class), or None."""
    text, _ = vllm_message(message)
    for kind, pattern in _FATAL:
        if at_message(pattern, text) is not None:
            return kind
    return None


def is_fatal_entry(entry: JournalEntry) -> bool:
    """A server's line (not systemd's) that says the engine died: worth a poll at once."""
    return not entry.is_systemd and fatal_kind(entry.message) is not None


def fatal_line(poll: Poll) -> Fatal | None:
    """The first fatal line of the running invocation among the poll's entries (None: none, the unit is not
    running, or the lines are an older invocation's)."""
    now = poll.observation
    if now is None or now.active != "active" or not now.invocation:
        return None
    for entry in poll.entries:
        if entry.is_systemd or entry.invocation != now.invocation:
            continue
        kind = fatal_kind(entry.message)
        if kind is not None:
            return Fatal(kind, entry.invocation, entry.at, entry.message[:200])
    return None
