"""Scheduler tracebacks as sglang 0.5.x prints them after ``Scheduler hit an exception: ``."""

from __future__ import annotations

_SITE = "/opt/sglang/venv/lib/python3.12/site-packages"
_FORWARD = [
    ("sglang/srt/managers/scheduler.py", 2925, "run_scheduler_process", "scheduler.event_loop_overlap()"),
    ("torch/utils/_contextlib.py", 116, "decorate_context", "return func(*args, **kwargs)"),
    ("sglang/srt/managers/scheduler.py", 1034, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
    (
        "sglang/srt/managers/scheduler.py",
        1888,
        "run_batch",
        "batch_result = self.model_worker.forward_batch_generation(",
    ),
    (
        "sglang/srt/managers/tp_worker.py",
        260,
        "forward_batch_generation",
        "logits_output, can_run_cuda_graph = self.model_runner.forward(",
    ),
    ("sglang/srt/model_executor/model_runner.py", 1890, "forward", "output = self._forward_raw("),
    ("sglang/srt/model_executor/model_runner.py", 1945, "_forward_raw", "ret = self.forward_extend("),
    ("sglang/srt/model_executor/model_runner.py", 1835, "forward_extend", "return self.model.forward("),
    (
        "torch/utils/_contextlib.py",
        116,
        "decorate_context",
        "return func(*args, **kwargs)",
    ),
    (
        "sglang/srt/models/deepseek_v2.py",
        2780,
        "forward",
        "hidden_states = self.model(input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors)",
    ),
    ("sglang/srt/models/deepseek_v2.py", 2610, "forward", "hidden_states, residual = layer("),
    ("sglang/srt/models/deepseek_v2.py", 2392, "forward", "hidden_states = self.mlp("),
    ("sglang/srt/models/deepseek_v2.py", 712, "forward", "return self.forward_normal("),
    ("sglang/srt/layers/moe/fused_moe_triton/layer.py", 862, "forward", "combine_input = self.run_moe_core("),
    (
        "sglang/srt/layers/moe/fused_moe_triton/fused_moe.py",
        1466,
        "fused_experts_impl",
        "intermediate_cache1 = torch.empty(",
    ),
]


_ALLOC = [
    ("sglang/srt/managers/scheduler.py", 2925, "run_scheduler_process", "scheduler.event_loop_overlap()"),
    ("torch/utils/_contextlib.py", 116, "decorate_context", "return func(*args, **kwargs)"),
    ("sglang/srt/managers/scheduler.py", 1017, "event_loop_overlap", "batch = self.get_next_batch_to_run()"),
    ("sglang/srt/managers/scheduler.py", 1551, "get_next_batch_to_run", "new_batch = self.get_new_batch_prefill()"),
    ("sglang/srt/managers/scheduler.py", 1764, "get_new_batch_prefill", "new_batch.prepare_for_extend()"),
    ("sglang/srt/managers/schedule_batch.py", 1262, "prepare_for_extend", "out_cache_loc = self.alloc_token_slots("),
    ("sglang/srt/managers/schedule_batch.py", 1003, "alloc_token_slots", "raise RuntimeError(error_msg)"),
]
_ALLOC_DECODE = [
    *_ALLOC[:3],
    (
        "sglang/srt/managers/scheduler.py",
        1575,
        "get_next_batch_to_run",
        "self.running_batch = self.update_running_batch(",
    ),
    ("sglang/srt/managers/scheduler.py", 1871, "update_running_batch", "batch.prepare_for_decode()"),
    (
        "sglang/srt/managers/schedule_batch.py",
        1602,
        "prepare_for_decode",
        "self.out_cache_loc = self.alloc_token_slots(bs)",
    ),
    ("sglang/srt/managers/schedule_batch.py", 1003, "alloc_token_slots", "raise RuntimeError(error_msg)"),
]
# 0.4.x/0.5.3 overlap scheduler: the forward runs in TpModelWorkerClient's thread, which logs the exception itself.
_OVERLAP_THREAD = [
    ("sglang/srt/managers/tp_worker_overlap_thread.py", 141, "forward_thread_func", "self.forward_thread_func_()"),
    ("torch/utils/_contextlib.py", 116, "decorate_context", "return func(*args, **kwargs)"),
    (
        "sglang/srt/managers/tp_worker_overlap_thread.py",
        176,
        "forward_thread_func_",
        "logits_output, next_token_ids, can_run_cuda_graph = self.worker.forward_batch_generation(",
    ),
    *_FORWARD[4:],
]
_KINDS = {
    "forward": _FORWARD,
    "forward_overlap_thread": _OVERLAP_THREAD,
    "prefill_alloc": _ALLOC,
    "decode_alloc": _ALLOC_DECODE,
}


def carets(code: str) -> str | None:
    """Python 3.11+'s ``^^^`` line under the failing call of a one-line statement (none for a whole-line call)."""
    if code.endswith("(") or code.count("(") != code.count(")"):
        return None  # a call spread over lines: only its first line is shown, without carets
    start = 0
    if code.startswith("return "):
        start = len("return ")
    elif " = " in code:
        start = code.index(" = ") + 3
    if start == 0:
        return None
    return "    " + " " * start + "^" * (len(code) - start)


def frame_lines(site: str, frames: list[tuple[str, int, str, str]]) -> list[str]:
    lines = []
    for path, lineno, func, code in frames:
        lines += [f'  File "{site}/{path}", line {lineno}, in {func}', f"    {code}"]
        mark = carets(code)
        if mark:
            lines.append(mark)
    return lines


def scheduler_traceback(exc_line: str, kind: str = "forward") -> str:
    return "\n".join(["Traceback (most recent call last):", *frame_lines(_SITE, _KINDS[kind]), exc_line])
