"""Startup pool failures, KV/request-slot exhaustion and unbalanced TP memory: not the OOM recipe."""

from __future__ import annotations

from remediate.core.diagnosis.advice import AdvisorInput, Recommendation, fmt_fraction, step_up, tokens_at
from remediate.core.diagnosis.findings import Diagnosis, Finding
from remediate.core.diagnosis.sizes import format_size as fs


def advise_startup(findings: list[Finding], s: AdvisorInput) -> Recommendation:
    """``Not enough memory``: the KV pool came out empty, so the fraction goes *up* (never down)."""
    f = next((g for g in findings if g.suggested_fraction is not None), findings[0])
    cur = f.mem_fraction_static if f.mem_fraction_static is not None else s.mem_fraction_static
    at = f" at --mem-fraction-static {fmt_fraction(cur)}" if cur is not None else ""
    reasons = [
        f"the KV pool came out empty at startup{at}: weights and KV cache get a fraction of the memory, "
        "so this wants a higher fraction; lowering it (the OOM recipe) makes it worse"
    ]
    target: float | None
    free0, free1 = s.free_before_weights_bytes, s.free_after_weights_bytes
    if f.suggested_fraction is not None:
        target = step_up(f.suggested_fraction)
        viable = f" (minimum viable {f.minimum_fraction})" if f.minimum_fraction is not None else ""
        reasons.append(f"sglang asks for above {f.suggested_fraction}{viable} → {fmt_fraction(target)}")
    elif free0 and free1 and free1 < free0:
        minimum = 1 - free1 / free0
        target = step_up(minimum)
        reasons.append(
            f"weights leave {fs(free1)} of the {fs(free0)} free before loading: the pool is empty up to "
            f"1 − {free1 / 2**30:.2f}/{free0 / 2**30:.2f} = {minimum:.4f} → {fmt_fraction(target)}, the first "
            "0.01 step above it"
        )
    elif cur is not None:
        target = round(cur + 0.01, 4)
        reasons.append(f"no avail-mem lines logged: one step up, {fmt_fraction(cur)} → {fmt_fraction(target)}")
    else:
        target = None
        reasons.append("neither the fraction nor the avail-mem lines were logged: raise --mem-fraction-static")
    if target is not None and cur is not None and target <= cur:
        target = round(cur + 0.01, 4)
    if target is not None and target >= 1:
        reasons.append("no fraction below 1 leaves room for the KV cache: the weights do not fit (more GPUs)")
        target = None
    tokens = tokens_at(s, target) if target is not None else None
    if tokens:
        reasons.append(f"expect ≈{tokens:,} KV tokens there")
    return Recommendation(mem_fraction_static=target, reasons=tuple(reasons), blocking=True)


def advise_kv_exhausted(findings: list[Finding], s: AdvisorInput) -> Recommendation:
    """The logical KV pool (or the request slots) ran out: fewer running requests; a lower fraction hurts."""
    f = findings[-1]
    reasons: list[str] = []
    if f.kind == "kv_pool_exhausted":
        asked = f" asked for {f.tokens_requested:,} KV tokens" if f.tokens_requested is not None else " ran out"
        avail = f" with {f.tokens_available:,} available" if f.tokens_available is not None else ""
        pool = f" of {s.max_total_num_tokens:,}" if s.max_total_num_tokens else ""
        reasons.append(
            f"the {f.phase or 'scheduler'} batch{asked}{avail}{pool}: the KV pool is full, not GPU memory; "
            "a lower --mem-fraction-static would shrink the pool further"
        )
    else:
        reasons.append(
            "the request slots (req_to_token pool) ran out: sglang asks for a smaller --max-running-requests; "
            "a lower --mem-fraction-static does not help"
        )
    other: dict[str, int | str] = {}
    # KV exhaustion: what was running when it hit; request slots: num_reqs is one call's count, not the load
    if f.kind == "kv_pool_exhausted":
        running = f.running_requests or s.max_running_requests
    else:
        running = s.max_running_requests
    if running and running > 1:
        other["--max-running-requests"] = max(1, running // 2)
        reasons.append(f"--max-running-requests {running} → {running // 2}")
    else:
        reasons.append("lower --max-running-requests")
    return Recommendation(
        mem_fraction_static=s.mem_fraction_static, other_flags=other, reasons=tuple(reasons), blocking=True
    )


def advise_unbalanced(findings: list[Finding], s: AdvisorInput) -> Recommendation:
    """Some GPU has far less free memory than the others: a neighbour process, not a knob of ours."""
    f = findings[0]
    detail = ""
    if f.min_gpu_memory_bytes is not None and f.local_gpu_memory_bytes is not None:
        detail = f" ({fs(f.min_gpu_memory_bytes)} free on the emptiest vs {fs(f.local_gpu_memory_bytes)} here)"
    reasons = (
        f"GPU memory is unbalanced across TP ranks{detail}: another process holds memory on one GPU; no knob "
        "of ours fixes a neighbour; free that GPU first",
    )
    return Recommendation(mem_fraction_static=s.mem_fraction_static, reasons=reasons, blocking=True)


# sglang 0.5.23 counts the draft before it sizes the pool (mem_cache/kv_cache_configurator.py
# ``_profile_available_bytes``, whose error ends "If using speculative decoding, draft weights are now counted.");
# 0.4.6.post5 did not (model_executor/model_runner.py ``init_memory_pool``: the draft worker allocates its weights
# and a pool of the target's size after the target was sized). The change is sglang#23862 (merged 2026-04-27: load
# both models' weights, then size the pools); the first release that carries it is not pinned here.
COUNTING_VERSIONS = (
    "sglang 0.5.23 counts them (sglang#23862); 0.4.6.post5 did not, and there only an auto-chosen "
    "fraction kept a flat reserve for the draft"
)


def uncounted_draft(diagnosis: Diagnosis) -> str | None:
    """The uncounted-draft pair: a speculative server OOMs at runtime at X and cannot start at a lower Y.

    The draft's weights and pool live in the headroom the target leaves, ``free0 * (1 - f)``: at X the
    prefill no longer fits beside them; at Y < X the target's own pool comes out empty. No fraction serves
    both while the draft is uncounted.
    """
    runs = diagnosis.runs
    oom: float | None = None
    for f in sorted(diagnosis.findings, key=lambda g: g.index):
        facts = runs[f.run] if 0 <= f.run < len(runs) else None
        if facts is None or not facts.speculative_algorithm:
            continue
        fraction = f.mem_fraction_static if f.mem_fraction_static is not None else facts.mem_fraction_static
        if fraction is None:
            continue
        if f.kind in ("cuda_oom_runtime", "cuda_error_oom"):
            oom = fraction
        elif f.kind == "kv_pool_too_small_at_startup" and oom is not None and fraction < oom:
            algo = facts.speculative_algorithm
            return (
                f"uncounted draft: with --speculative-algorithm {algo} the server hit a CUDA OOM at runtime at "
                f"{fmt_fraction(oom)} and could not size its pool at startup at {fmt_fraction(fraction)}: the "
                "draft model's weights and KV pool come out of the headroom the fraction leaves, so no fraction "
                f"fits both; draft weights must be counted before the pool is sized: {COUNTING_VERSIONS}. "
                "Upgrade sglang, or shrink the draft's share (lower --speculative-num-draft-tokens, "
                "--speculative-num-steps, --speculative-eagle-topk), or fewer --max-running-requests"
            )
    return None
