"""Split the journal into runs of the server and read each run's memory facts (sglang's startup lines).

The startup lines are read by :mod:`remediate.core.startup` (the one parser of them), each at the start of
its message (after the prefixes): a request or prompt that sglang logs ("… max_total_num_tokens=1 …") is not a
startup line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from remediate.core.diagnosis.findings import RunFacts
from remediate.core.diagnosis.sizes import gib_to_bytes
from remediate.core.logline import LogLine
from remediate.core.startup import (
    LOAD_BEGIN_RE,
    LOAD_END_RE,
    SERVER_ARGS_RE,
    parse_capacity,
    parse_server_args,
    rank_and_message,
)

_SYSTEMD_START = re.compile(r"^(?:\S+: )?Start(?:ed|ing) \S+")
# The run's own settings from its server_args line (the other args are the budget's, not diagnosis's).
_RUN_ARGS = (
    "mem_fraction_static", "chunked_prefill_size", "cuda_graph_max_bs", "max_running_requests", "tp_size",
    "speculative_algorithm",
)  # fmt: skip
_READY = "The server is fired up and ready to roll!"


def _min(old: int | None, new: int | None) -> int | None:
    if new is None:
        return old
    return new if old is None else min(old, new)


@dataclass
class RunSplitter:
    """Feed lines in order; ``run`` is the index of the run the last line belongs to."""

    runs: list[RunFacts] = field(default_factory=lambda: [RunFacts()])
    _has_content: bool = False

    @property
    def run(self) -> int:
        return len(self.runs) - 1

    def feed(self, line: LogLine) -> None:
        text = line.text
        message = rank_and_message(line)[1]
        is_args = bool(SERVER_ARGS_RE.match(message))
        starts = is_args or (
            (line.is_systemd or not line.ident) and not line.has_sglang_prefix and bool(_SYSTEMD_START.match(text))
        )
        if starts and self._has_content:
            self.runs.append(RunFacts(start_index=line.index))
            self._has_content = False
        if not (line.is_systemd or _SYSTEMD_START.match(text)):
            self._has_content = True
        facts = self.runs[-1]
        if is_args:
            args = parse_server_args(message)
            facts = replace(facts, **{name: args[name] for name in _RUN_ARGS if name in args})  # type: ignore[arg-type]
        elif m := LOAD_BEGIN_RE.match(message):
            facts = replace(facts, free_before_weights_bytes=_min(facts.free_before_weights_bytes, gib_to_bytes(m[1])))
        elif m := LOAD_END_RE.match(message):
            facts = replace(facts, free_after_weights_bytes=_min(facts.free_after_weights_bytes, gib_to_bytes(m[1])))
        elif capacity := parse_capacity(message):
            chunk = capacity.chunked_prefill_size
            gpu_mem = capacity.available_gpu_mem_gib
            facts = replace(
                facts,
                max_total_num_tokens=capacity.max_total_num_tokens,
                chunked_prefill_size=chunk if chunk is not None else facts.chunked_prefill_size,
                available_gpu_mem_bytes=gib_to_bytes(str(gpu_mem))
                if gpu_mem is not None
                else facts.available_gpu_mem_bytes,
            )
        elif text.startswith(_READY) and not facts.is_ready:
            facts = replace(facts, is_ready=True, ready_index=line.index)
        self.runs[-1] = facts
