"""The unit's restart history: NRestarts and start-limit-hit from ``systemctl show`` and the journal."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from remediate.core.diagnosis.findings import Finding
from remediate.core.logline import LogLine, message_text
from remediate.core.numbers import as_int

# systemd's words when it stops restarting a crash-looping unit (the start limit): systemd src/core/unit.c and
# service.c, each message prefixed by the unit's name ("sglang.service: "); only at the start of the message
# (a logged request that quotes them is not systemd giving up).
GAVE_UP_RE = re.compile(r"(?:\S+: )?(?:Start request repeated too quickly|Failed with result 'start-limit-hit')")
_COUNTER = re.compile(r"(?:\S+: )?Scheduled restart job, restart counter is at (\d+)")
CRASH_LOOP_RESTARTS = 3  # this many automatic restarts (without a new start by hand) is a loop


def is_gave_up(line: str) -> bool:
    """Whether one raw journal line is systemd giving up restarting the unit."""
    return GAVE_UP_RE.match(message_text(line)) is not None


def gave_up_restarting(lines: list[str]) -> bool:
    """Whether these journal lines say systemd stopped restarting the unit (its start limit was hit)."""
    return any(is_gave_up(line) for line in lines)


def crash_loop_finding(
    lines: Sequence[LogLine], show: Mapping[str, str], previous_restarts: int | None, *, run: int
) -> Finding | None:
    """One crash_loop finding when systemd gave up (start-limit-hit) or keeps restarting the server."""
    said_by_systemd = [line for line in lines if line.is_systemd or not (line.ident or line.has_sglang_prefix)]
    evidence = [line for line in said_by_systemd if GAVE_UP_RE.match(line.text) or _COUNTER.match(line.text)]
    counters = [int(m[1]) for line in evidence if (m := _COUNTER.match(line.text))]
    restarts = as_int(show.get("NRestarts"), text=True)
    if restarts is None and counters:
        restarts = counters[-1]
    hit = show.get("Result") == "start-limit-hit" or any(GAVE_UP_RE.match(line.text) for line in evidence)
    growing = previous_restarts is not None and restarts is not None and restarts > previous_restarts
    if not (hit or growing or (restarts or 0) >= CRASH_LOOP_RESTARTS):
        return None
    if evidence:
        main = next((line for line in reversed(evidence) if GAVE_UP_RE.match(line.text)), evidence[-1])
        text, index = main.evidence, main.index
    else:
        text, index = f"NRestarts={restarts} Result={show.get('Result', '')} (systemctl show)", -1
    if hit:
        note = "systemd stopped restarting the unit (start-limit-hit)"
    elif growing:
        note = f"NRestarts grew from {previous_restarts} to {restarts}"
    else:
        note = f"restarted {restarts} times"
    return Finding(
        kind="crash_loop",
        line=text,
        evidence=tuple(line.evidence for line in evidence[-4:]) or (text,),
        index=index,
        run=run,
        restarts=restarts,
        note=note,
    )
