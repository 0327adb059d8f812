"""The simulated scheduler: one forward at a time, prefix cache, fragmentation, and the OOM crash."""

from __future__ import annotations

import os
import signal
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import logs, memory, timing

_WORDS = (
    " The answer is that memory is a shared budget and the pool takes what the fraction allows,"
    " while activations need headroom beyond it."
).split(" ")[1:]

_SITE = "/opt/sglang/venv/lib/python3.12/site-packages"
_TRACE = [
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


def scheduler_traceback(exc_line: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, lineno, func, code in _TRACE:
        lines.append(f'  File "{_SITE}/{path}", line {lineno}, in {func}')
        lines.append(f"    {code}")
    lines.append(exc_line)
    return "\n".join(lines)


class GenerateError(ValueError):
    """A request rejected the way sglang's tokenizer manager rejects it (HTTP 400)."""


@dataclass
class Chunk:
    """One streamed output: cumulative text, new ids, and the counters sglang reports."""

    text: str
    new_ids: list[int]
    completion_tokens: int
    finished: bool


def text_to_ids(text: str) -> list[int]:
    return [zlib.crc32(word.encode()) % 150000 for word in text.split()]


class Engine:
    def __init__(
        self,
        plan: memory.MemoryPlan,
        profile: memory.Profile,
        *,
        chunked_prefill_size: int,
        context_len: int,
        time_scale: float,
        prefill_scale: float = 1.0,
        decode_scale: float = 1.0,
        expandable: bool = False,
        radix_cache: bool = True,
        crash: Callable[[], None] | None = None,
    ) -> None:
        self.plan = plan
        self.profile = profile
        self.chunked_prefill_size = chunked_prefill_size
        self.context_len = context_len
        self.time_scale = time_scale
        self.prefill_scale = prefill_scale
        self.decode_scale = decode_scale
        self.expandable = expandable
        self.radix_cache = radix_cache
        self.frag_gib = 0.0
        self.forward_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.running = 0
        self.used_tokens = 0
        self.last_gen_throughput = 0.0
        self.served = 0
        self._cache: list[tuple[int, ...]] = []
        self._crash = crash or self._default_crash
        self._decode_steps = 0

    # ------------------------------------------------------------------ cache
    def _cached_prefix(self, ids: list[int]) -> int:
        if not self.radix_cache:
            return 0
        best = 0
        key = tuple(ids)
        for old in self._cache:
            lo, hi = 0, min(len(old), len(key))
            if hi <= best or old[:best] != key[:best]:
                continue
            lo = best
            while lo < hi:  # binary search on C-level slice equality
                mid = (lo + hi + 1) // 2
                if old[:mid] == key[:mid]:
                    lo = mid
                else:
                    hi = mid - 1
            best = max(best, lo)
        return min(best, max(0, len(ids) - 1))

    def _remember(self, ids: list[int]) -> None:
        if self.radix_cache and ids:
            self._cache.append(tuple(ids))
            del self._cache[:-32]

    def flush_cache(self) -> bool:
        with self.state_lock:
            if self.running:
                return False
            self._cache.clear()
        logs.tp0("Cache flushed successfully!")
        return True

    # ------------------------------------------------------------------ validation
    def validate(self, prompt_tokens: int, max_new_tokens: int) -> None:
        if prompt_tokens >= self.context_len:
            raise GenerateError(
                f"The input ({prompt_tokens} tokens) is longer than the model's context length "
                f"({self.context_len} tokens)."
            )
        if prompt_tokens >= self.plan.max_req_input_len:
            raise GenerateError(
                f"Input length ({prompt_tokens} tokens) exceeds the maximum allowed length "
                f"({self.plan.max_req_input_len} tokens). Use a shorter input or enable --allow-auto-truncate."
            )

    # ------------------------------------------------------------------ forwards
    def _sleep(self, simulated: float) -> None:
        if simulated > 0 and self.time_scale > 0:
            time.sleep(simulated * self.time_scale)

    def _usage(self) -> float:
        return self.used_tokens / max(1, self.plan.max_total_num_tokens)

    def _prefill(self, ids: list[int]) -> int:
        with self.forward_lock:
            cached = self._cached_prefix(ids)
            new = len(ids) - cached
            chunk = self.chunked_prefill_size if self.chunked_prefill_size > 0 else new
            done = 0
            while True:
                step = min(chunk, new - done) if new else 0
                logs.tp0(
                    f"Prefill batch. #new-seq: 1, #new-token: {step}, #cached-token: {cached if done == 0 else 0}, "
                    f"token usage: {self._usage():.2f}, #running-req: {self.running - 1}, #queue-req: 0,"
                )
                spike = memory.prefill_spike_bytes(self.profile, step, self.chunked_prefill_size)
                oom = memory.check_prefill(self.plan, self.profile, spike, self.frag_gib)
                if oom is not None:
                    self._oom(oom)
                self._sleep(timing.prefill_seconds(step, cached + done) * self.prefill_scale)
                done += step
                if done >= new:
                    break
            self.used_tokens += len(ids)
            return cached

    def _oom(self, oom: memory.OOM) -> None:
        exc = "torch.OutOfMemoryError: " + memory.torch_oom_message(oom)
        logs.tp0("Scheduler hit an exception: " + scheduler_traceback(exc))
        self._crash()
        while True:  # the process is about to die; never answer this request
            time.sleep(1)

    @staticmethod
    def _default_crash() -> None:
        os.kill(os.getpid(), signal.SIGQUIT)

    def _decode_step(self, context: int) -> None:
        with self.forward_lock:
            dt = timing.decode_token_seconds(context) * self.decode_scale
            self._sleep(dt)
            self.last_gen_throughput = round(1.0 / dt, 2) if dt > 0 else 0.0
            self.used_tokens += 1
            self._decode_steps += 1
            if self._decode_steps % 40 == 0:
                logs.tp0(
                    f"Decode batch. #running-req: {self.running}, #token: {self.used_tokens}, "
                    f"token usage: {self._usage():.2f}, cuda graph: True, "
                    f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: 0,"
                )

    def generate(self, ids: list[int], max_new_tokens: int) -> Iterator[tuple[int, Chunk]]:
        """Yield (cached_tokens, chunk) per output token. Raises nothing; may kill the process on OOM."""
        with self.state_lock:
            self.running += 1
        produced = 0
        try:
            cached = self._prefill(ids)
            self._remember(ids)
            text = ""
            for i in range(max_new_tokens):
                if i:
                    self._decode_step(len(ids) + i)
                word = _WORDS[i % len(_WORDS)]
                text = word if not text else text + " " + word
                produced = i + 1
                yield cached, Chunk(text, [zlib.crc32(word.encode()) % 150000], produced, produced == max_new_tokens)
            if max_new_tokens == 0:
                yield cached, Chunk("", [], 0, True)
        finally:
            with self.state_lock:
                self.running -= 1
                self.used_tokens = max(0, self.used_tokens - len(ids) - produced)
                self.served += 1
                self.frag_gib = memory.fragmentation_after(
                    self.profile, self.frag_gib, len(ids) + produced, self.expandable
                )
