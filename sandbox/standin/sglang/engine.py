"""The simulated scheduler: one forward at a time, prefix cache, KV-pool accounting, fragmentation, OOM crashes."""

from __future__ import annotations

import os
import signal
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import gpus, knobs, logs, memory, oomtext, runtime, timing
from .oomtext import runtime_oom_exception
from .traces import scheduler_traceback

_WORDS = (
    " The answer is that memory is a shared budget and the pool takes what the fraction allows,"
    " while activations need headroom beyond it."
).split(" ")[1:]


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


CLIP_MAX_NEW_TOKENS = 4096  # sglang's admission estimate caps each request's future decode tokens


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
        neighbours: list[gpus.Neighbour] | None = None,
        board: gpus.Board | None = None,
        kv_admission: str = "queue",
        vocab_size: int | None = None,
        overlap_thread: bool = False,
        oom_style: str = "torch",
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
        self.kv_admission = kv_admission
        self.vocab_size = vocab_size or profile.vocab_size
        self.frag_gib = 0.0
        self.forward_lock = threading.Lock()
        self.state_lock = threading.Condition()
        self.running = 0  # requests in the scheduler: waiting for KV room, prefilling or decoding
        self.used_tokens = 0  # KV slots held by running requests
        self.reserved_tokens = 0  # decode tokens admitted requests may still need (queue admission)
        self.last_gen_throughput = 0.0
        self.served = 0
        self._cache: list[tuple[int, ...]] = []
        self._crash = crash or self._default_crash
        self._decode_steps = 0
        self.start_neighbours = list(neighbours or [])
        self.board = board
        self.pid = os.getpid()
        self.overlap_thread = overlap_thread  # 0.4.x/0.5.3 overlap scheduler: TpModelWorkerClient logs the OOM
        self.active = 0  # requests holding a req_to_token slot (admitted)
        self.oom_style = oom_style
        self.late_records: list[tuple[int, str]] = []  # logged by the SIGQUIT handler, after its own line

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

    def evictable_tokens(self) -> int:
        """Tokens the radix cache holds for finished requests (evicted on demand; running ones are locked)."""
        held = sum(len(c) for c in self._cache)
        return max(0, min(held, self.plan.max_total_num_tokens - self.used_tokens))

    def flush_cache(self) -> bool:
        with self.state_lock:
            if self.running:
                return False
            self._cache.clear()
        logs.tp0("Cache flushed successfully!")
        return True

    # ------------------------------------------------------------------ validation
    def max_new_tokens_for(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """The scheduler clips max_new_tokens so prompt + output fit: ``max_req_len - len(input) - 1``."""
        max_req_len = min(self.context_len - 1, self.plan.max_total_num_tokens - 1)
        return max(0, min(max_new_tokens, max_req_len - prompt_tokens - 1))

    def validate(self, ids: list[int], max_new_tokens: int) -> None:
        """The tokenizer manager's and the scheduler's checks, in sglang's order and words."""
        prompt_tokens = len(ids)
        if any(i >= self.vocab_size for i in ids):
            raise GenerateError(f"The input_ids {ids} contains values greater than the vocab size ({self.vocab_size}).")
        if prompt_tokens >= self.context_len:
            raise GenerateError(
                f"The input ({prompt_tokens} tokens) is longer than the model's context length "
                f"({self.context_len} tokens)."
            )
        if max_new_tokens + prompt_tokens >= self.context_len:
            raise GenerateError(
                f"Requested token count exceeds the model's maximum context length of {self.context_len} tokens. "
                f"You requested a total of {max_new_tokens + prompt_tokens} tokens: {prompt_tokens} tokens from the "
                f"input messages and {max_new_tokens} tokens for the completion. Please reduce the number of tokens "
                "in the input messages or the completion to fit within the limit."
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

    def _neighbours_now(self) -> list[gpus.Neighbour]:
        """Neighbours can come and go while the server runs: re-read the knobs (the start set if unreadable)."""
        try:
            return gpus.neighbours(knobs.load_knobs())
        except (OSError, ValueError):
            return self.start_neighbours

    def _memory_failures(self, spike: int) -> list[tuple[int, oomtext.OOM]]:
        nbs = self._neighbours_now()
        tp = self.plan.tp_size
        start, now = gpus.others_gib(self.start_neighbours, tp), gpus.others_gib(nbs, tp)
        failures = []
        for r in range(tp):
            oom = runtime.check_prefill(
                self.plan,
                self.profile,
                spike,
                self.frag_gib,
                rank=r,
                others=gpus.others_on(nbs, r),
                taken_gib=now[r] - start[r],
                pid=self.pid,
            )
            if oom is not None:
                failures.append((r, oom))
        return failures

    def _kv_room(self) -> int:
        return self.plan.max_total_num_tokens - self.used_tokens

    def _admit(self, new_tokens: int, max_new: int) -> None:
        """Queue admission: wait for a request slot and KV room for the prompt and its output (sglang's PrefillAdder).

        With ``kv_admission: crash`` nothing waits: a request beyond the req_to_token pool dies in alloc_req_slots.
        """
        future = min(max_new, CLIP_MAX_NEW_TOKENS)
        with self.state_lock:
            if self.kv_admission == "queue":
                self.state_lock.wait_for(
                    lambda: (
                        self.active < self.plan.max_running_requests
                        and self._kv_room() - self.reserved_tokens >= new_tokens + future
                    )
                )
            elif self.active >= self.plan.max_num_reqs:
                self._req_slots_exhausted()
            self.reserved_tokens += future
            self.active += 1

    def _req_slots_exhausted(self) -> None:
        msg = (
            "alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`. "
            f"self.req_to_token_pool.available_size()={max(0, self.plan.max_num_reqs - self.active)}, num_reqs=1, "
        )
        tb = "Scheduler hit an exception: " + scheduler_traceback("RuntimeError: " + msg, "prefill_alloc")
        self._die([(r, tb) for r in range(self.plan.tp_size)])

    def _kv_exhausted(self, phase: str, need: int, kind: str) -> None:
        evictable = self.evictable_tokens()
        available = max(0, self._kv_room() - evictable)
        msg = (
            f"{phase} out of memory. Try to lower your batch size.\n"
            f"Try to allocate {need} tokens.\n"
            f"Available tokens: {available + evictable} (available_size={available} + evictable_size={evictable})\n"
        )
        tb = "Scheduler hit an exception: " + scheduler_traceback("RuntimeError: " + msg, kind)
        self._die([(r, text) for r in range(self.plan.tp_size) for text in (msg, tb)])

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
                    f"token usage: {self._usage():.2f}, #running-req: {self.running - 1}, #queue-req: 0, "
                )
                if step > self._kv_room():
                    self._kv_exhausted("Prefill", step, "prefill_alloc")
                spike = runtime.prefill_spike_bytes(self.profile, step, self.chunked_prefill_size)
                failures = self._memory_failures(spike)
                if failures:
                    self._oom(failures)
                with self.state_lock:
                    self.used_tokens += step + (cached if done == 0 else 0)
                self._sleep(timing.prefill_seconds(step, cached + done) * self.prefill_scale)
                done += step
                if done >= new:
                    break
            return cached

    def _oom(self, failures: list[tuple[int, oomtext.OOM]]) -> None:
        records = []
        for r, oom in failures:
            exc = runtime_oom_exception(self.oom_style, oom, r)
            if self.overlap_thread:
                text = "TpModelWorkerClient hit an exception: " + scheduler_traceback(exc, "forward_overlap_thread")
            else:
                text = "Scheduler hit an exception: " + scheduler_traceback(exc)
            records.append((r, text))
        self._die(records)

    def _die(self, records: list[tuple[int, str]]) -> None:
        """The ranks' last words, then the process tree goes down.

        The first failing rank logs and SIGQUITs the main process; the other ranks, failing in the same forward,
        are still logging while the main process logs its SIGQUIT line and kills the tree (``late_records``).
        """
        first = records[0][0]
        for r, text in records:
            if r == first:
                logs.rank(r, text)
            else:
                self.late_records.append((r, text))
        self._crash()
        while True:  # the process is about to die; never answer this request
            time.sleep(1)

    @staticmethod
    def _default_crash() -> None:
        os.kill(os.getpid(), signal.SIGQUIT)

    def _decode_step(self, context: int) -> None:
        with self.forward_lock:
            if self._kv_room() < 1:
                if self.kv_admission == "crash":
                    self._kv_exhausted("Decode", 1, "decode_alloc")
                logs.tp0(
                    "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.7000 -> 1.0000"
                )
            dt = timing.decode_token_seconds(context) * self.decode_scale
            self._sleep(dt)
            self.last_gen_throughput = round(1.0 / dt, 2) if dt > 0 else 0.0
            with self.state_lock:
                self.used_tokens += 1
            self._decode_steps += 1
            if self._decode_steps % 40 == 0:
                logs.tp0(
                    f"Decode batch. #running-req: {self.running}, #token: {self.used_tokens}, "
                    f"token usage: {self._usage():.2f}, cuda graph: True, "
                    f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: 0, "
                )

    def publish(self) -> None:
        """This server's per-GPU usage for nvidia-smi: everything but the free headroom."""
        if self.board is None:
            return
        tp, total = self.plan.tp_size, self.plan.gpu_total
        start = gpus.others_gib(self.start_neighbours, tp)
        self.board.publish([total - start[r] - (self.plan.rank_available(r) - self.frag_gib) for r in range(tp)])

    def generate(self, ids: list[int], max_new_tokens: int) -> Iterator[tuple[int, Chunk]]:
        """Yield (cached_tokens, chunk) per output token. Raises nothing; may kill the process on OOM."""
        max_new = self.max_new_tokens_for(len(ids), max_new_tokens)
        with self.state_lock:
            self.running += 1
        produced = 0
        held = 0
        future = min(max_new, CLIP_MAX_NEW_TOKENS)
        admitted = False
        try:
            self._admit(len(ids), max_new)
            admitted = True
            cached = self._prefill(ids)
            held = len(ids)
            text = ""
            for i in range(max_new):
                if i:
                    self._decode_step(len(ids) + i)
                    held += 1
                word = _WORDS[i % len(_WORDS)]
                text = word if not text else text + " " + word
                produced = i + 1
                yield cached, Chunk(text, [zlib.crc32(word.encode()) % 150000], produced, produced == max_new)
            if max_new == 0:
                yield cached, Chunk("", [], 0, True)
        finally:
            with self.state_lock:
                self.running -= 1
                self.used_tokens = max(0, self.used_tokens - held)
                if admitted:
                    self.reserved_tokens -= future
                    self.active -= 1
                if held:
                    self._remember(ids)  # the finished request's KV stays in the radix cache (evictable)
                self.served += 1
                self.frag_gib = runtime.fragmentation_after(
                    self.profile, self.frag_gib, len(ids) + produced, self.expandable
                )
                self.state_lock.notify_all()
            self.publish()
