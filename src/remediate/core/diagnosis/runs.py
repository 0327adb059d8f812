"""Split the journal into runs of the server and read each run's memory facts (sglang's startup lines).

Each startup line is matched at the start of its message (after the prefixes): a request or prompt that
sglang logs ("… max_total_num_tokens=1 …") is not a startup line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from remediate.core.diagnosis.findings import RunFacts
from remediate.core.diagnosis.lines import LogLine
from remediate.core.diagnosis.sizes import gib_to_bytes

_SERVER_ARGS = re.compile(r"server_args=ServerArgs\(")
# A field of the ServerArgs repr (dataclass __repr__: "ServerArgs(a=1, b=2)"), not text inside a value.
_FIELD = r"(?:(?<=\()|(?<=, ))"
_ARG = {
    "mem_fraction_static": re.compile(rf"{_FIELD}mem_fraction_static=(\d+(?:\.\d+)?)"),
    "chunked_prefill_size": re.compile(rf"{_FIELD}chunked_prefill_size=(-?\d+)"),
    "cuda_graph_max_bs": re.compile(rf"{_FIELD}cuda_graph_max_bs=(\d+)"),
    "max_running_requests": re.compile(rf"{_FIELD}max_running_requests=(\d+)"),
    "tp_size": re.compile(rf"{_FIELD}tp_size=(\d+)"),
}
_SYSTEMD_START = re.compile(r"^(?:\S+: )?Start(?:ed|ing) \S+")
_LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=(\d+(?:\.\d+)?) GB")
_LOAD_END = re.compile(r"Load weight end\..*?avail mem=(\d+(?:\.\d+)?) GB")
# sglang's capacity line (SGLANG.md §2.1), every version from 0.4.6 on.
_CAPACITY = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+|None), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+)(?:, available_(?:gpu|cpu)_mem=(\d+(?:\.\d+)?) GB)?"
)
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
        is_args = bool(_SERVER_ARGS.match(text))
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
            values: dict[str, int | float] = {}
            for name, regex in _ARG.items():
                m = regex.search(text)
                if m:
                    values[name] = float(m.group(1)) if name == "mem_fraction_static" else int(m.group(1))
            facts = replace(facts, **values)  # type: ignore[arg-type]
        elif m := _LOAD_BEGIN.match(text):
            facts = replace(facts, free_before_weights_bytes=_min(facts.free_before_weights_bytes, gib_to_bytes(m[1])))
        elif m := _LOAD_END.match(text):
            facts = replace(facts, free_after_weights_bytes=_min(facts.free_after_weights_bytes, gib_to_bytes(m[1])))
        elif m := _CAPACITY.match(text):
            chunk = None if m[2] == "None" else int(m[2])
            facts = replace(
                facts,
                max_total_num_tokens=int(m[1]),
                chunked_prefill_size=chunk if chunk is not None else facts.chunked_prefill_size,
                available_gpu_mem_bytes=gib_to_bytes(m[6]) if m[6] else facts.available_gpu_mem_bytes,
            )
        elif text.startswith(_READY) and not facts.is_ready:
            facts = replace(facts, is_ready=True, ready_index=line.index)
        self.runs[-1] = facts
