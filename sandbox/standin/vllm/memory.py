"""Pure memory model of the vLLM stand-in (V1 sizing, vllm/v1/worker/gpu_worker.py), GiB floats.

requested = total × utilization; non-KV = weights + the profile run's activation peak (at max_num_batched_tokens)
+ non-torch memory; available KV = requested − non-KV; blocks = bytes // (block_size × KV bytes a token);
tokens = blocks × block_size. At runtime a prefill chunk of ``c`` tokens ending at context ``L`` needs its
activation (profiled) plus the attention workspace over the context (``attn_gib_per_tok2 × c × L``, which the
profile's short dummy sequences never reach) plus, without expandable segments, fragmentation. It dies when that
exceeds what is left: the profiled peak plus the memory outside the utilization (total − requested) less what
other processes took. See sandbox/README.md ("vLLM stand-in") for the incident's numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1 << 30
KIB = 1 << 10


@dataclass(frozen=True)
class Profile:
    model: str = "standin/mha-13b-40k"
    total_gib: float = 79.19  # an H100 80GB as torch reports it
    context_gib: float = 0.81  # CUDA context etc.: free at init = total − this − neighbours
    weights_gib: float = 24.30
    non_torch_gib: float = 0.60
    act_gib_per_token: float = 1 / 4096  # profile peak: 4 GiB at 16384 batched tokens
    kv_bytes_per_token: int = 800 * KIB  # 40 layers × 40 heads × 128 × 2 (K, V) × 2 bytes
    max_model_len: int = 40960
    attn_gib_per_tok2: float = 3.0 / (16384 * 32768)
    frag_gib: float = 1.5  # without expandable_segments
    vocab_size: int = 152064


def default_batched_tokens(total_gib: float, gpu_name: str = "NVIDIA H100 80GB HBM3") -> int:
    """EngineArgs._set_default_args (0.11): 8192 for the OpenAI server on >= 70 GiB non-A100 GPUs, else 2048."""
    return 8192 if total_gib >= 70 and "a100" not in gpu_name.lower() else 2048


def default_max_num_seqs(total_gib: float, gpu_name: str = "NVIDIA H100 80GB HBM3") -> int:
    """EngineArgs._set_default_args (0.11): 1024 for the OpenAI server on >= 70 GiB non-A100 GPUs, else 256."""
    return 1024 if total_gib >= 70 and "a100" not in gpu_name.lower() else 256


def sampler_need_gib(p: Profile, num_seqs: int) -> float:
    """The profile run's sampler warm-up (gpu_model_runner.py _dummy_sampler_run): one row of float32 logits and
    one of probabilities per dummy request."""
    return num_seqs * p.vocab_size * 8 / GIB


def profile_room_gib(p: Profile, free_gib: float, batched: int) -> float:
    """What the GPU has left for the sampler during the profile run: free at init less the weights, the
    activation peak and the non-torch memory (the KV cache is not allocated yet)."""
    return free_gib - p.weights_gib - p.act_gib_per_token * batched - p.non_torch_gib


@dataclass(frozen=True)
class Sizing:
    requested_gib: float
    peak_gib: float
    available_gib: float
    blocks: int
    tokens: int


def size(p: Profile, utilization: float, batched: int, block_size: int = 16) -> Sizing:
    requested = p.total_gib * utilization
    peak = p.act_gib_per_token * batched
    available = requested - (p.weights_gib + peak + p.non_torch_gib)
    blocks = max(0, int(available * GIB) // (block_size * p.kv_bytes_per_token))
    return Sizing(requested, peak, available, blocks, blocks * block_size)


def needed_gib(p: Profile, max_model_len: int, block_size: int = 16) -> float:
    """KV for one request of max_model_len (whole blocks), as check_enough_kv_cache_memory needs it."""
    return math.ceil(max_model_len / block_size) * block_size * p.kv_bytes_per_token / GIB


def chunk_need_gib(p: Profile, chunk: int, context_end: int, expandable: bool) -> float:
    """What one prefill chunk allocates beyond the KV cache."""
    frag = 0.0 if expandable else p.frag_gib
    return p.act_gib_per_token * chunk + p.attn_gib_per_tok2 * chunk * context_end + frag


def chunk_room_gib(p: Profile, sizing: Sizing, others_gib: float) -> float:
    """Room for a chunk: the profiled peak plus what lies outside the utilization, less other processes."""
    return sizing.peak_gib + (p.total_gib - sizing.requested_gib) - others_gib


def chunks(prompt: int, batched: int) -> list[tuple[int, int]]:
    """(chunk, context at its end) for a prompt prefilled in pieces of at most ``batched`` tokens."""
    out, done = [], 0
    while done < prompt:
        step = min(batched, prompt - done)
        done += step
        out.append((step, done))
    return out
