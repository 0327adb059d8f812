"""Human output of `remediate diagnose`: per host, what happened, why, the evidence and the command to run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from remediate.models import HostResult, UnitState

_WHAT = {
    "cuda_oom_runtime": "torch ran out of GPU memory while serving",
    "cuda_oom_graph_capture": "CUDA graph capture ran out of GPU memory at startup",
    "kv_pool_too_small_at_startup": "the KV cache pool came out empty at startup (Not enough memory)",
    "kv_pool_exhausted": "the scheduler ran out of KV-cache tokens (the pool was full, not the GPU)",
    "req_slots_exhausted": "the scheduler ran out of request slots",
    "cuda_error_oom": "a CUDA error that means out of memory",
    "tp_memory_unbalanced": "GPU memory was unbalanced across TP ranks at startup",
    "crash_loop": "systemd kept restarting the unit",
    "invalid_server_argument": "the server refused its command line at startup (argparse, exit 2)",
    "expandable_segments_refused": "sglang refused expandable segments at startup (Mooncake over EFA or the "
    "weight-cache daemon)",
    # vLLM (core/engines/vllm/failures.py)
    "other-process": "another process holds memory on the server's GPU (vLLM's startup check)",
    "no-cache-memory": "vLLM found no memory left for the KV cache at startup",
    "max-model-len": "vLLM's KV cache at startup cannot hold one request of its max_model_len",
    "sampler-oom": "the sampler's warm-up (max_num_seqs dummy requests) ran out of GPU memory at startup",
    "runtime-oom": "torch ran out of GPU memory in vLLM's engine while serving (a prefill)",
    "init-failed": "vLLM's engine failed to start; its cause lies further back than the lines read",
}


def _what(finding: dict[str, Any]) -> str:
    what = _WHAT.get(str(finding["kind"]), str(finding["kind"]))
    if finding.get("possible"):
        what = "a CUDA error that may mean out of memory (illegal memory access)"
    where = [f"TP{finding['rank']}"] if finding.get("rank") is not None else []
    if finding.get("phase") not in (None, "unknown"):
        tokens = f" of {finding['prefill_tokens']:,} tokens" if finding.get("prefill_tokens") else ""
        where.append(f"{finding['phase']}{tokens}")
    return what + (f" ({', '.join(where)})" if where else "")


def diagnose_report(console: Console, results: Sequence[HostResult]) -> None:
    """`remediate diagnose`: per host, what happened, why, the evidence, and the command to run."""
    for r in results:
        head = f"[bold]{escape(r.host)}[/bold] {escape(r.unit or '')}"
        if r.error:
            console.print(f"{head} [red]error[/red] {escape(r.error)}", highlight=False)
            continue
        unit = r.diagnosis.state if r.diagnosis is not None else UnitState()
        state = f"{unit.active_state or ''} ({unit.sub_state or ''}), NRestarts={unit.n_restarts}"
        if source := r.source:  # --journal: a saved journal, no live state
            state = f"saved journal {source['journal']} ({source['format']}); absent: {_joined(source['absent'])}"
        console.print(f"{head}  {escape(state)}", highlight=False)
        if r.engine_version is not None:
            console.print(f"  engine: {escape(r.engine_version.describe())}", highlight=False)
        findings: Sequence[dict[str, Any]] = r.findings or ()
        rec: dict[str, Any] = r.recommendation or {}
        if not findings:
            console.print("  no crash evidence in the journal read", highlight=False)
        crashes = [f for f in findings if f["kind"] != "crash_loop"]
        main = next((f for f in crashes if f["kind"] == rec.get("kind")), crashes[0] if crashes else None)
        for f in findings:
            console.print(f"  what happened: {escape(_what(f))}", highlight=False)
        if r.diagnosis is not None and r.diagnosis.is_stale:
            console.print("  [cyan]the server started fine after this failure: the evidence is old[/cyan]")
        if main is not None:
            console.print("  evidence:", highlight=False)
            shown = [line for line in main["evidence"] if not line.startswith("  ")]
            for line in shown[-6:]:
                console.print(f"    {escape(line)}", highlight=False, soft_wrap=True)
        if findings:
            console.print("  why:", highlight=False)
            for reason in rec.get("reasons", []):
                console.print(f"    - {escape(reason)}", highlight=False)
            knobs = _knobs(rec)
            if knobs:
                console.print(f"  recommendation: {escape(knobs)}", highlight=False)
        if rec.get("blocking"):
            console.print("  [yellow]`remediate oom` refuses this host without --force[/yellow]", highlight=False)
        if rec.get("command"):
            console.print(f"  run: [bold]{escape(rec['command'])}[/bold]", highlight=False)
        for gpu in _gpus(r):
            used, total = gpu["used_bytes"] / 2**30, gpu["total_bytes"] / 2**30
            console.print(f"  GPU {gpu['index']}: {used:.2f} of {total:.2f} GiB in use", highlight=False)
        for note in r.notes:
            console.print(f"  note: {escape(note)}", highlight=False)


def _gpus(result: HostResult) -> Sequence[dict[str, Any]]:
    return result.diagnosis.gpus if result.diagnosis is not None else ()


def _joined(names: object) -> str:
    return ", ".join(str(n) for n in names) if isinstance(names, list) else ""


def _knobs(rec: dict[str, Any]) -> str:
    parts = []
    if rec.get("mem_fraction_static") is not None:
        whole, _, frac = f"{rec['mem_fraction_static']:.4f}".partition(".")
        parts.append(f"--mem-fraction-static {whole}.{frac.rstrip('0').ljust(2, '0')}")
    if rec.get("chunked_prefill_size") is not None:
        parts.append(f"--chunked-prefill-size {rec['chunked_prefill_size']}")
    if rec.get("alloc_conf"):
        parts.append(f"PYTORCH_CUDA_ALLOC_CONF={rec['alloc_conf']}")
    parts += [f"{flag} {value}" for flag, value in rec.get("other_flags", {}).items()]
    return ", ".join(parts)
