"""Runtime and graph-capture CUDA OOMs: expandable segments, chunked prefill, then the smallest step down."""

from __future__ import annotations

import math

from remediate.core.alloc_conf import EXPANDABLE, has_expandable
from remediate.core.diagnosis.advice import (
    CHUNK,
    MIN_FRACTION,
    SHARE,
    STEP,
    AdvisorInput,
    Recommendation,
    fmt_fraction,
    neighbours,
    tokens_at,
)
from remediate.core.diagnosis.findings import LOADING_NOTE, Finding
from remediate.core.diagnosis.sizes import format_size as fs


def _worst(findings: list[Finding]) -> Finding:
    def short(f: Finding) -> int:
        if f.tried_bytes is None or f.free_bytes is None:
            return -1
        return f.tried_bytes - f.free_bytes

    return max(findings, key=short)


def advise_runtime(findings: list[Finding], s: AdvisorInput) -> Recommendation:
    f = _worst(findings)
    reasons: list[str] = []
    blocking = False
    for proc in {p.pid: p for g in findings for p in neighbours(g, s.server_pids)}.values():
        blocking = True
        gpu = f"GPU {f.gpu}" if f.gpu is not None else "the GPU"
        reasons.append(
            f"process {proc.pid} holds {fs(proc.bytes)} on {gpu}: another process shares it, and no knob of "
            "ours fixes a neighbour; stop or move it first"
        )
    if f.note == LOADING_NOTE:
        reasons.append(
            "the OOM came while loading the weights: --mem-fraction-static only sizes the KV pool after loading, "
            "so no fraction fixes weights that do not fit; use more GPUs (--tp-size) or a smaller/quantized model"
        )
        return Recommendation(mem_fraction_static=s.mem_fraction_static, reasons=tuple(reasons), blocking=blocking)
    tried, free, ru = f.tried_bytes, f.free_bytes, f.reserved_unallocated_bytes
    where = f" (TP{f.rank})" if f.rank is not None else ""
    alloc: str | None = None
    expandable = has_expandable(s.alloc_conf)
    have_numbers = tried is not None and free is not None
    if have_numbers:
        assert tried is not None and free is not None
        short = max(0, tried - free)
        reasons.append(f"{fs(tried)} needed, {fs(free)} free{where}: short by {fs(short)}")
    else:
        short = 0
        reasons.append(f"{f.kind} without allocator numbers{where}: the shortfall is unknown")
    if expandable:
        reasons.append(f"{EXPANDABLE} is already set")
        ru_gain = 0
    elif ru is not None and ru > 0 and (not short or ru >= SHARE * short):
        alloc = EXPANDABLE
        recovers = "recovers it" if ru >= short else f"recovers {fs(ru)} of it"
        reasons.append(f"{fs(ru)} reserved but unallocated → {EXPANDABLE} {recovers}")
        ru_gain = ru
    elif ru is not None and ru > 0:
        reasons.append(f"only {fs(ru)} reserved but unallocated: fragmentation is not the cause")
        ru_gain = 0
    else:
        if not have_numbers:
            alloc = EXPANDABLE
            reasons.append(f"{EXPANDABLE} avoids fragmentation of the caching allocator")
        ru_gain = 0
    need = tried or 0
    chunk, need, chunk_reason = _chunking(f, s, need)
    if chunk_reason:
        reasons.append(chunk_reason)
    other: dict[str, int | str] = {}
    if f.phase == "decode":
        running = f.running_requests or s.max_running_requests
        if running and running > 1:
            other["--max-running-requests"] = max(1, running // 2)
        reasons.append(
            "the OOM came during decode: fewer running requests need less activation memory"
            + (f" ({running} → {running // 2})" if running and running > 1 else "")
        )
    remaining = max(0, need - (free or 0) - ru_gain) if have_numbers else 0
    fraction, fraction_reasons = _fraction_for(f, s, remaining, have_numbers)
    reasons += fraction_reasons
    return Recommendation(
        mem_fraction_static=fraction,
        chunked_prefill_size=chunk,
        alloc_conf=alloc,
        other_flags=other,
        reasons=tuple(reasons),
        blocking=blocking,
    )


def _chunking(f: Finding, s: AdvisorInput, need: int) -> tuple[int | None, int, str | None]:
    """Chunked prefill bounds the spike when it scales with the prefill size."""
    if f.phase != "prefill":
        return None, need, None
    cur = s.chunked_prefill_size
    if cur is not None and 0 < cur <= CHUNK:
        return None, need, f"chunked prefill is already {cur}"
    tokens = f.prefill_tokens
    now = "chunking off" if cur is not None and cur <= 0 else f"chunk {cur}" if cur else "chunk size not logged"
    if tokens is None or not f.tried_bytes:
        return CHUNK, need, f"prefill OOM ({now}): --chunked-prefill-size {CHUNK} bounds the prefill spike"
    if tokens <= CHUNK:
        return None, need, f"the prefill was {tokens} tokens: chunking at {CHUNK} would not shrink it"
    per_token = f.tried_bytes / tokens
    spike = int(per_token * CHUNK)
    reason = (
        f"{tokens} tokens prefilled at once ({now}): {fs(int(per_token))} per token × {CHUNK} = {fs(spike)} "
        f"instead of {fs(f.tried_bytes)} ({tokens / CHUNK:.0f}× smaller) with --chunked-prefill-size {CHUNK}"
    )
    return CHUNK, spike, reason


def _fraction_for(f: Finding, s: AdvisorInput, remaining: int, have_numbers: bool) -> tuple[float | None, list[str]]:
    """The smallest step down whose added headroom covers what is still missing (never a step up)."""
    cur = s.mem_fraction_static
    if cur is None:
        return None, ["the current --mem-fraction-static is not known: no fraction computed"]
    if have_numbers and remaining == 0:
        return cur, [f"nothing left missing after that: --mem-fraction-static stays at {fmt_fraction(cur)}"]
    if not have_numbers:
        new = round(cur - STEP, 4)
        return new, [f"one step down for headroom: {fmt_fraction(cur)} → {fmt_fraction(new)}"]
    base, what = s.free_before_weights_bytes, "free before weights"
    if not base:
        base, what = f.total_bytes or s.total_gpu_bytes, "total"
    if not base:
        new = round(cur - STEP, 4)
        return new, [
            f"still short by {fs(remaining)}; GPU size unknown: one step, {fmt_fraction(cur)} → {fmt_fraction(new)}"
        ]
    per_step = int(STEP * base)
    steps = math.ceil(remaining / per_step)
    new = round(cur - steps * STEP, 4)
    reasons = [
        f"still short by {fs(remaining)}: each 0.01 of --mem-fraction-static adds {fs(per_step)} of headroom "
        f"(0.01 × {fs(base)} {what}) → {steps} step{'s' if steps > 1 else ''}: "
        f"{fmt_fraction(cur)} → {fmt_fraction(new)}"
    ]
    if new < MIN_FRACTION:
        reasons.append(f"{fmt_fraction(new)} is below {MIN_FRACTION}: the workload does not fit this GPU")
        new = max(new, MIN_FRACTION)
    tokens = tokens_at(s, new)
    if tokens is not None and s.max_total_num_tokens is not None:
        reasons.append(f"the KV pool shrinks to ≈{tokens:,} tokens (from {s.max_total_num_tokens:,})")
    return new, reasons


OLD_GRAPH_FLAG = "--cuda-graph-max-bs"  # sglang 0.5.5 server_args.py ServerArgs.add_cli_args
NEW_GRAPH_FLAG = "--cuda-graph-max-bs-decode"  # sglang 0.5.23 arg_groups/fields/exec_.py cuda_graph_max_bs_decode


def advise_graph_capture(findings: list[Finding], s: AdvisorInput) -> Recommendation:
    """Graph capture OOM at startup: fewer captured batch sizes, or the smallest step down."""
    f = _worst(findings)
    reasons: list[str] = []
    other: dict[str, int | str] = {}
    # The spelling the running version accepts (sglang 0.5.23 has only --cuda-graph-max-bs-decode/-prefill, and
    # the old --cuda-graph-max-bs is an ambiguous prefix there: argparse exits 2): sglang's own hint line names it,
    # else the release the host runs (core/engines/sglang/flags.py graph_batch_flag), else the unit's argv (a unit
    # that already writes -decode runs a new sglang); unknown: both are said.
    flag = f.graph_flag or s.release_graph_flag or s.graph_flag
    bs = s.cuda_graph_max_bs
    if flag and bs and bs > 1:
        other[flag] = max(1, bs // 2)
        reasons.append(f"CUDA graph capture ran out of memory: {flag} {bs} → {bs // 2} captures fewer batch sizes")
    elif flag:
        reasons.append(f"CUDA graph capture ran out of memory: a smaller {flag} captures fewer batch sizes")
    else:
        smaller = f" ({bs} → {bs // 2})" if bs and bs > 1 else ""
        reasons.append(
            f"CUDA graph capture ran out of memory: a smaller decode graph batch{smaller} captures fewer batch sizes: "
            f"{OLD_GRAPH_FLAG} up to sglang 0.5.13, {NEW_GRAPH_FLAG} from 0.5.14 (0.5.20 and later refuse the old "
            "spelling at startup; the sglang version was not read)"
        )
    have = f.tried_bytes is not None and f.free_bytes is not None
    remaining = max(0, (f.tried_bytes or 0) - (f.free_bytes or 0))
    if have:
        reasons.append(f"{fs(f.tried_bytes or 0)} needed, {fs(f.free_bytes or 0)} free: short by {fs(remaining)}")
    fraction, more = _fraction_for(f, s, max(remaining, 1) if have else 0, have)
    return Recommendation(mem_fraction_static=fraction, other_flags=other, reasons=tuple(reasons + more))
