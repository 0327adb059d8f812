"""The startup sequence: per-rank log lines, the memory plan, and the startup failures (exit 1)."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable

from . import gpus, logs, memory, oomtext, resolution, runtime
from .traces import frame_lines

# Share of the simulated load time spent in each startup phase.
PHASES = {"dist": 0.03, "weights": 0.82, "kv": 0.01, "graph": 0.12, "tail": 0.02}
_GRAPH_HINTS = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
_SITE = "/opt/sglang/venv/lib/python3.12/site-packages/sglang"
_INIT_FRAMES = [
    ("srt/managers/scheduler.py", 2901, "run_scheduler_process", "scheduler = Scheduler("),
    ("srt/managers/scheduler.py", 322, "__init__", "self.init_model_worker()"),
    ("srt/managers/tp_worker.py", 98, "__init__", "self.model_runner = ModelRunner("),
]
_RUNNER_INIT = ("srt/model_executor/model_runner.py", 330, "__init__", "self.initialize(min_per_gpu_memory)")
_FRAMES = {
    "unbalanced": [
        ("srt/model_executor/model_runner.py", 318, "__init__", "min_per_gpu_memory = self.init_torch_distributed()"),
        ("srt/model_executor/model_runner.py", 716, "init_torch_distributed", "raise ValueError("),
    ],
    "weights": [
        _RUNNER_INIT,
        ("srt/model_executor/model_runner.py", 401, "initialize", "self.load_model()"),
        ("srt/model_loader/loader.py", 590, "load_model", "model = _initialize_model("),
    ],
    "pool": [
        _RUNNER_INIT,
        ("srt/model_executor/model_runner.py", 420, "initialize", "self.init_memory_pool("),
        ("srt/model_executor/model_runner.py", 1402, "init_memory_pool", "raise RuntimeError("),
    ],
    "pool_0.5.2x": [
        _RUNNER_INIT,
        ("srt/model_executor/model_runner.py", 512, "initialize", "self.init_memory_pool(pre_model_load_memory)"),
        (
            "srt/mem_cache/kv_cache_configurator.py",
            203,
            "configure",
            "available_bytes = self._profile_available_bytes(",
        ),
        ("srt/mem_cache/kv_cache_configurator.py", 318, "_profile_available_bytes", "raise ValueError("),
    ],
    "graph": [
        _RUNNER_INIT,
        ("srt/model_executor/model_runner.py", 452, "initialize", "self.init_device_graphs()"),
        ("srt/model_executor/model_runner.py", 2160, "init_device_graphs", "self.graph_runner = CudaGraphRunner(self)"),
        ("srt/model_executor/cuda_graph_runner.py", 392, "__init__", "raise Exception("),
    ],
}
# The capture's own traceback: sglang re-raises it as ``Exception(f"Capture cuda graph failed: {e}\n…")``, so
# Python prints it first, then "During handling of the above exception, another exception occurred:".
_CAPTURE_FRAMES = [
    ("srt/model_executor/cuda_graph_runner.py", 386, "__init__", "self.capture()"),
    ("srt/model_executor/cuda_graph_runner.py", 503, "capture", ") = self.capture_one_batch_size(bs, forward)"),
    ("srt/model_executor/cuda_graph_runner.py", 667, "capture_one_batch_size", "run_once()"),
    ("srt/model_executor/cuda_graph_runner.py", 651, "run_once", "logits_output_or_pp_proxy_tensors = forward("),
    ("srt/models/deepseek_v2.py", 2780, "forward", "hidden_states = self.model("),
    ("srt/layers/moe/fused_moe_triton/fused_moe.py", 1466, "fused_experts_impl", "intermediate_cache1 = torch.empty("),
]


def _traceback(frames: list[tuple[str, int, str, str]]) -> list[str]:
    return ["Traceback (most recent call last):", *frame_lines(_SITE, frames)]


def capture_failure(oom_text: str) -> str:
    """The chained traceback's text after the first line (the caller prefixes ``Scheduler hit an exception: ``)."""
    inner = _traceback(_CAPTURE_FRAMES) + ["torch.OutOfMemoryError: " + oom_text, ""]
    inner.append("During handling of the above exception, another exception occurred:")
    inner.append("")
    return "\n".join(inner)


def rank_order(tp: int, phase: int) -> list[int]:
    """A fixed interleaving per phase: the ranks' processes reach each step in a different order."""
    return sorted(range(tp), key=lambda r: ((r * 5 + phase * 3) % tp, r))


def die_initialization(
    ranks: list[int], exc_of: Callable[[int], str], frames: str, cause_of: Callable[[int], str] | None = None
) -> None:
    """Scheduler exceptions during launch: each failing rank logs its traceback, the main process exits 1."""
    for r in ranks:
        cause = cause_of(r) + "\n" if cause_of else ""
        tb = _traceback(_INIT_FRAMES + _FRAMES[frames])
        logs.rank(r, "Scheduler hit an exception: " + cause + "\n".join(tb + [exc_of(r)]))
    logs.main(f"Rank {min(ranks)} scheduler is dead. Please check if there are relevant logs.")
    logs.main("Exit code: 1")
    logs.main(
        "Traceback (most recent call last):\n"
        f'  File "{_SITE}/launch_server.py", line 32, in <module>\n'
        "    run_server(server_args)\n"
        f'  File "{_SITE}/srt/entrypoints/engine.py", line 1012, in _launch_subprocesses\n'
        '    raise RuntimeError("Initialization failed. Please see the error messages above.")\n'
        "RuntimeError: Initialization failed. Please see the error messages above."
    )
    sys.stdout.flush()
    os._exit(1)


def boot(
    sa: dict,
    profile: memory.Profile,
    version: tuple[int, ...],
    nbs: list[gpus.Neighbour],
    board: gpus.Board,
    sleep: Callable[[str], None],
    load_s: float,
    force_graph_failure: bool = False,
    post_capture: bool = False,
) -> memory.MemoryPlan:
    """Log the startup as every TP rank does and return the plan; a startup failure never returns.
    ``post_capture``: the pool is sized after CUDA-graph capture (resolution.py)."""
    tp = int(sa["tp_size"])
    total = profile.gpu_total_gib
    others = gpus.others_gib(nbs, tp)
    free0s = memory.rank_free0(profile, tp, others)
    weight = memory.weight_per_rank(profile, tp)
    free1s = [f - weight for f in free0s]
    pid = os.getpid()

    def publish(free: list[float]) -> None:
        board.publish([total - others[r] - free[r] for r in range(tp)])

    logs.ranks(rank_order(tp, 0), lambda r: "Init torch distributed begin.")
    sleep("dist")
    try:
        memory.check_balance(free0s)
    except memory.UnbalancedMemoryError as exc:
        bad = {r: memory.unbalanced_message(low, local) for r, low, local in exc.ranks}
        die_initialization(sorted(bad), lambda r: f"ValueError: {bad[r]}", "unbalanced")
    publish(list(free0s))
    logs.ranks(
        rank_order(tp, 1), lambda r: f"Init torch distributed ends. mem usage={total - others[r] - free0s[r]:.2f} GB"
    )
    logs.ranks(rank_order(tp, 2), lambda r: f"Load weight begin. avail mem={free0s[r]:.2f} GB")
    sleep("weights")
    if weight >= min(free0s):
        tried = int(1.75 * memory.GIB)
        tot = int(round(total * memory.GIB))
        oom = oomtext.OOM(tried, tot, 0, tot, int(profile.free0_gib * memory.GIB), 0, pid=pid)
        die_initialization(
            [r for r in range(tp) if weight >= free0s[r]],
            lambda r: "torch.OutOfMemoryError: " + oomtext.torch_oom_message(oom, r),
            "weights",
        )
    publish(free1s)
    logs.ranks(
        rank_order(tp, 3),
        lambda r: (
            f"Load weight end. type={profile.architecture}, dtype={profile.dtype}, "
            f"avail mem={free1s[r]:.2f} GB, mem usage={weight:.2f} GB."
        ),
    )
    draft = memory.KIMI_K26_DRAFT if sa.get("speculative_algorithm") else None
    counted = draft is not None and version >= memory.DRAFT_COUNTED_FROM
    dweight = memory.draft_weight_per_rank(draft, tp) if draft else 0.0
    if counted:  # both models' weights are loaded before the target's pool is sized
        _load_draft(tp, free1s, dweight, publish)
    graph_failed = False
    try:
        plan = memory.plan_memory(
            profile,
            float(sa["mem_fraction_static"]),
            tp_size=tp,
            page_size=sa["page_size"],
            kv_cache_dtype=sa["kv_cache_dtype"],
            max_total_tokens=sa["max_total_tokens"],
            context_length=sa["context_length"],
            max_running_requests=sa["max_running_requests"],
            cuda_graph_max_bs=sa["cuda_graph_max_bs"],
            disable_cuda_graph=sa["disable_cuda_graph"],
            others_gib=others,
            version=version,
            draft=draft,
        )
    except memory.NotEnoughMemoryError as exc:
        text = f"{exc.exc_name}: {exc}"
        die_initialization(list(range(tp)), lambda r: text, "pool_0.5.2x" if exc.exc_name == "ValueError" else "pool")
        raise  # not reached
    except memory.GraphCaptureOOMError as exc:
        plan, graph_failed = exc.plan, True
    # sglang mem_cache/memory_pool.py _finalize_allocation_log: "VA upper bound" when sized after capture
    label = "KV Cache VA upper bound" if post_capture else "KV Cache is allocated"
    logs.ranks(
        rank_order(tp, 4),
        lambda r: f"{label}. #tokens: {plan.max_total_num_tokens}, KV size: {plan.kv:.2f} GB",
    )
    if draft is not None and counted:
        _draft_pool(tp, plan)
    uncounted = 0.0 if counted else plan.draft_weight + plan.draft_kv  # an uncounted draft is not loaded yet
    logs.ranks(
        rank_order(tp, 5),
        lambda r: f"Memory pool end. avail mem={plan.after_pool + uncounted + plan.rank_extra(r):.2f} GB",
    )
    if draft is not None and not counted:  # the draft worker starts after the target's pool: into its headroom
        _load_draft(tp, [plan.after_pool + uncounted + plan.rank_extra(r) for r in range(tp)], dweight, publish)
        _draft_pool(tp, plan)
        logs.ranks(
            rank_order(tp, 5), lambda r: f"Memory pool end. avail mem={plan.after_pool + plan.rank_extra(r):.2f} GB"
        )
    before = [plan.before_graph + plan.rank_extra(r) for r in range(tp)]
    publish(before)
    sleep("kv")
    if not sa["disable_cuda_graph"]:
        logs.ranks(
            rank_order(tp, 6),
            lambda r: f"Capture cuda graph begin. This can take up to several minutes. avail mem={before[r]:.2f} GB",
        )
        sleep("graph")
    failing = [r for r in range(tp) if plan.rank_available(r) <= 0] if graph_failed else []
    if force_graph_failure and not failing:
        failing = [0]
    if failing:

        def oom_text(r: int) -> str:
            return oomtext.torch_oom_message(runtime.graph_capture_oom(plan, profile, r, pid), r)

        die_initialization(
            failing,
            lambda r: "Exception: Capture cuda graph failed: " + oom_text(r) + "\n" + _GRAPH_HINTS,
            "graph",
            cause_of=lambda r: capture_failure(oom_text(r)),
        )
    publish([plan.rank_available(r) for r in range(tp)])
    if not sa["disable_cuda_graph"]:
        logs.ranks(
            rank_order(tp, 7),
            lambda r: (
                f"Capture cuda graph end. Time elapsed: {load_s * PHASES['graph']:.2f} s. "
                f"mem usage={plan.graph:.2f} GB. avail mem={plan.rank_available(r):.2f} GB."
            ),
        )
    if post_capture:
        plan = _post_capture_pool(tp, plan, int(sa["page_size"]))
    logs.tp0(
        f"max_total_num_tokens={plan.max_total_num_tokens}, chunked_prefill_size={sa['chunked_prefill_size']}, "
        f"max_prefill_tokens={sa['max_prefill_tokens']}, max_running_requests={plan.max_running_requests}, "
        f"context_len={plan.context_len}, available_gpu_mem={plan.rank_available(0):.2f} GB"
    )
    return plan


def _post_capture_pool(tp: int, plan: memory.MemoryPlan, page_size: int) -> memory.MemoryPlan:
    """sglang model_runner_components/kv_pool_runtime.py compute_post_capture_kv_resize: the pool sized from what
    is free after the graphs, its two summary lines on every rank."""
    tokens = resolution.post_capture_tokens(plan.max_total_num_tokens, plan.graph, plan.cell_bytes, page_size)
    kv = tokens * plan.cell_bytes / (1 << 30)
    logs.ranks(rank_order(tp, 7), lambda r: f"Post-capture KV sizing: full_layer_tokens={tokens}, swa_layer_tokens=0")
    logs.ranks(
        rank_order(tp, 7),
        lambda r: (
            f"Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: {tokens}, "
            f"KV size: {kv:.2f} GB, avail mem={plan.rank_available(r) + plan.kv - kv:.2f} GB"
        ),
    )
    return dataclasses.replace(plan, max_total_num_tokens=tokens, kv=kv)


def _load_draft(tp: int, free: list[float], weight: float, publish: Callable[[list[float]], None]) -> None:
    """The draft worker's own ModelRunner.load_model lines (sglang model_executor/model_runner.py)."""
    logs.ranks(rank_order(tp, 2), lambda r: f"Load weight begin. avail mem={free[r]:.2f} GB")
    after = [f - weight for f in free]
    publish(after)
    logs.ranks(
        rank_order(tp, 3),
        lambda r: (
            f"Load weight end. type={memory.KIMI_K26_DRAFT.architecture}, dtype=torch.bfloat16, "
            f"avail mem={after[r]:.2f} GB, mem usage={weight:.2f} GB."
        ),
    )
    free[:] = after


def _draft_pool(tp: int, plan: memory.MemoryPlan) -> None:
    """The draft's KV pool: the target's token count at the draft's own cell."""
    logs.ranks(
        rank_order(tp, 4),
        lambda r: f"KV Cache is allocated. #tokens: {plan.max_total_num_tokens}, KV size: {plan.draft_kv:.2f} GB",
    )


def make_sleep(load_s: float, scale: float) -> Callable[[str], None]:
    def sleep(phase: str) -> None:
        time.sleep(load_s * PHASES[phase] * scale)

    return sleep
