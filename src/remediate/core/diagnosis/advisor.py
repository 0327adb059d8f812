"""PURE: findings + the unit's current settings → which way to turn each knob, with the arithmetic.

Directions (the pool is sized from the fraction in sglang mem_cache/kv_cache_configurator.py
``_profile_available_bytes``; model_executor/pool_configurator.py raises ``Not enough memory``): a runtime
CUDA OOM wants more headroom (expandable segments, chunked prefill, a *lower* fraction); a startup ``Not
enough memory`` wants a *higher* fraction; a flag argparse refused or expandable segments sglang refused are
configuration errors (no fraction); KV-pool exhaustion wants fewer running requests; another process on
the GPU is fixed by no knob of ours. The fraction is never raised for a runtime OOM nor lowered for a startup
one.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace

from remediate.core.diagnosis.advice import CHUNK, AdvisorInput, Recommendation, fmt_fraction, resolved
from remediate.core.diagnosis.config_errors import advise_expandable_refused, advise_invalid_argument
from remediate.core.diagnosis.findings import Diagnosis, Finding
from remediate.core.diagnosis.pools import advise_kv_exhausted, advise_startup, advise_unbalanced, uncounted_draft
from remediate.core.diagnosis.runtime import advise_graph_capture, advise_runtime
from remediate.core.diagnosis.sizes import format_size as fs

_PRIORITY = (
    "invalid_server_argument",
    "expandable_segments_refused",
    "kv_pool_too_small_at_startup",
    "tp_memory_unbalanced",
    "kv_pool_exhausted",
    "req_slots_exhausted",
    "cuda_oom_graph_capture",
    "cuda_oom_runtime",
    "cuda_error_oom",
)


def advise(diagnosis: Diagnosis, settings: AdvisorInput | None = None) -> Recommendation:
    """The recommendation for the latest failure in ``diagnosis``."""
    s = resolved(settings or AdvisorInput(), diagnosis.facts)
    latest = diagnosis.latest
    notes = [f"{f.kind}: {f.note}" for f in latest if f.kind == "crash_loop" and f.note]
    crash = [f for f in latest if f.kind != "crash_loop"]
    if not crash:
        reasons = ["no crash evidence in the journal read", *notes]
        return Recommendation(mem_fraction_static=s.mem_fraction_static, reasons=tuple(reasons))
    kind = min((f.kind for f in crash), key=_PRIORITY.index)
    of_kind = [f for f in crash if f.kind == kind]
    rec = _ADVISORS[kind](of_kind, s)
    if kind in _MEMORY_KINDS and s.neighbour_processes:
        held = ", ".join(f"process {pid} holds {fs(used)}" for pid, used in s.neighbour_processes)
        first = f"nvidia-smi: {held} outside the server: no knob of ours fixes a neighbour; stop or move it first"
        rec = replace(rec, reasons=(first, *rec.reasons), blocking=True)
    if diagnosis.is_stale:
        notes.append("the server started fine after this failure: the evidence is old")
    if (draft := uncounted_draft(diagnosis)) is not None:
        notes.insert(0, draft)
        rec = replace(rec, blocking=True)
    others = sorted({f.kind for f in crash} - {kind})
    if others:
        notes.append("also seen: " + ", ".join(others))
    return replace(rec, kind=kind, reasons=rec.reasons + tuple(notes))


# failures that more free GPU memory would have avoided: a neighbour on the GPU contradicts the recipe
_MEMORY_KINDS = frozenset({"cuda_oom_runtime", "cuda_oom_graph_capture", "cuda_error_oom", "tp_memory_unbalanced"})

_ADVISORS: dict[str, Callable[[list[Finding], AdvisorInput], Recommendation]] = {
    "invalid_server_argument": advise_invalid_argument,
    "expandable_segments_refused": advise_expandable_refused,
    "kv_pool_too_small_at_startup": advise_startup,
    "tp_memory_unbalanced": advise_unbalanced,
    "kv_pool_exhausted": advise_kv_exhausted,
    "req_slots_exhausted": advise_kv_exhausted,
    "cuda_oom_graph_capture": advise_graph_capture,
    "cuda_oom_runtime": advise_runtime,
    "cuda_error_oom": advise_runtime,
}


def oom_command(target: str, unit: str | None, rec: Recommendation) -> str | None:
    """The exact ``remediate oom …`` that applies ``rec`` (None when no knob of ours is the fix)."""
    if rec.kind is None or rec.mem_fraction_static is None:
        return None
    if rec.blocking and rec.kind != "kv_pool_too_small_at_startup":
        return None
    argv = ["remediate", "oom", target]
    if unit:
        argv += ["--unit", unit]
    argv += ["--mem-fraction-static", fmt_fraction(rec.mem_fraction_static)]
    if rec.chunked_prefill_size is not None and rec.chunked_prefill_size != CHUNK:
        argv += ["--chunked-prefill-size", str(rec.chunked_prefill_size)]
    if rec.blocking:
        argv.append("--force")
    return shlex.join(argv)
