"""PURE: one JSON line per healthy server start that remediate saw (the calibration record).

Every ``oom`` and ``rollback`` that ends healthy appends one; ``plan`` reads those of the same host,
model and TP size to correct the budget model and to show the error it had. The file is written and
read elsewhere (the host layer); here are only the record and its (tolerant) parser: a line that is not
a well-formed record is skipped, never an error, so a damaged file never blocks a remediation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from remediate.core.capacity.pool import Measured
from remediate.core.startup import StartupNumbers

SCHEMA = 1


@dataclass(frozen=True)
class Observation:
    host: str
    model_path: str
    tp_size: int | None
    fraction: float
    tokens: int  # max_total_num_tokens the server reported
    chunked_prefill_size: int | None = None
    alloc_conf: str | None = None
    free0_gib: float | None = None
    free1_gib: float | None = None
    kv_tokens: int | None = None
    kv_gib: float | None = None
    available_gpu_mem_gib: float | None = None
    command: str = ""  # "oom" / "rollback"
    at: str = ""  # ISO-8601 UTC, given by the caller
    engine: str = "sglang"  # "vllm": fraction is --gpu-memory-utilization, tokens the logged GPU KV cache size

    def to_json(self) -> str:
        return json.dumps({"schema": SCHEMA, **asdict(self)}, sort_keys=True, separators=(",", ":"))

    def measured(self) -> Measured:
        return Measured(self.fraction, self.tokens, f"{self.command or 'observed'} {self.at}".strip())


def observation_from(
    *,
    host: str,
    model_path: str,
    tp_size: int | None,
    fraction: float,
    tokens: int,
    startup: StartupNumbers | None,
    chunked_prefill_size: int | None,
    alloc_conf: str | None,
    command: str,
    at: str,
) -> Observation:
    startup = startup or StartupNumbers()
    return Observation(
        host=host,
        model_path=model_path,
        tp_size=tp_size,
        fraction=fraction,
        tokens=tokens,
        chunked_prefill_size=chunked_prefill_size,
        alloc_conf=alloc_conf,
        free0_gib=startup.free0_gib,
        free1_gib=startup.free1_gib,
        kv_tokens=startup.kv_tokens,
        kv_gib=startup.kv_gib,
        available_gpu_mem_gib=startup.available_gpu_mem_gib,
        command=command,
        at=at,
    )


_TYPES: dict[str, tuple[type, ...]] = {
    "host": (str,),
    "model_path": (str,),
    "tp_size": (int, type(None)),
    "fraction": (float, int),
    "tokens": (int,),
    "chunked_prefill_size": (int, type(None)),
    "alloc_conf": (str, type(None)),
    "free0_gib": (float, int, type(None)),
    "free1_gib": (float, int, type(None)),
    "kv_tokens": (int, type(None)),
    "kv_gib": (float, int, type(None)),
    "available_gpu_mem_gib": (float, int, type(None)),
    "command": (str,),
    "at": (str,),
    "engine": (str,),
}
_REQUIRED = ("host", "model_path", "fraction", "tokens")


def _record(data: Any) -> Observation | None:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    fields: dict[str, Any] = {}
    for key, types in _TYPES.items():
        if key not in data:
            if key in _REQUIRED:
                return None
            continue
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, types):
            return None
        fields[key] = value
    if not 0.0 < float(fields["fraction"]) < 1.0 or fields["tokens"] <= 0:
        return None
    fields["fraction"] = float(fields["fraction"])
    return Observation(**fields)


def parse_observations(lines: Iterable[str]) -> list[Observation]:
    """Every well-formed record, in file order; anything else is skipped."""
    found: list[Observation] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        record = _record(data)
        if record is not None:
            found.append(record)
    return found


def matching(
    observations: Iterable[Observation], host: str, model_path: str, tp_size: int | None, engine: str = "sglang"
) -> list[Measured]:
    """The measured pools of the same host, engine, model and TP size, oldest first."""
    return [
        o.measured()
        for o in observations
        if o.host == host
        and o.engine == engine
        and o.model_path == model_path
        and (tp_size is None or o.tp_size in (None, tp_size))
    ]
