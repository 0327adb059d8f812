"""Pure GPU-memory model of an sglang 0.5.x server (no I/O, stdlib only).

Everything here is arithmetic on numbers taken from a *profile*; the server module calls it to decide what
to log, what to report on /server_info and whether a prefill dies with torch's OOM.  See README.md
("Memory model") for the calibration and the reasoning behind each constant.

Units: GiB floats (as sglang logs them, ``/ (1 << 30)``) unless a name ends in ``_bytes``. Self-contained (no
package imports), so it also loads as a lone file; the runtime side (prefill spikes, OOMs) is runtime.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10


@dataclass(frozen=True)
class Profile:
    """A GPU plus a model at a given tensor-parallel degree (numbers are per TP rank)."""

    name: str
    gpu_total_gib: float  # card capacity, as torch prints it in the OOM text
    free0_gib: float  # free before weight load on the emptiest-handed rank: sglang's min_per_gpu_memory
    weight_gib_at_profile_tp: float  # weights per rank at ``tp_size``
    tp_size: int
    model_type: str
    architecture: str
    kv_lora_rank: int  # MLA latent dim
    qk_rope_head_dim: int
    num_layers: int
    context_len: int  # from the model's config.json
    default_chunked_prefill_size: int  # what an absent --chunked-prefill-size resolves to (see README)
    default_cuda_graph_max_bs: int
    # runtime overheads that live in the (1 - mfs) headroom
    workspace_gib: float  # attention/MoE workspaces, logits and sampling buffers, custom all-reduce
    graph_base_gib: float  # CUDA graph private pool: base + per captured batch size
    graph_per_bs_gib: float
    activation_bytes_per_token: int  # prefill activation spike per token of the prefill chunk
    frag_step_gib: float  # "reserved but unallocated" growth per served request (>= frag_full_tokens)
    frag_full_tokens: int  # a request this long (prompt + output) adds a full step, shorter ones pro rata
    frag_cap_gib: float
    rank_free_delta_gib: tuple[float, ...] = ()  # extra free memory per rank over free0 (NCCL buffers differ)
    vocab_size: int = 163840
    dtype: str = "torch.bfloat16"


KIMI_K26_TP8 = Profile(
    name="kimi-k2.6-tp8",
    gpu_total_gib=94.97,
    free0_gib=91.60,
    weight_gib_at_profile_tp=72.425297,
    tp_size=8,
    model_type="kimi_k25",
    architecture="KimiK25ForConditionalGeneration",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    num_layers=61,
    context_len=262144,
    default_chunked_prefill_size=-1,
    default_cuda_graph_max_bs=512,
    workspace_gib=1.376,
    graph_base_gib=0.30,
    graph_per_bs_gib=0.0016,
    activation_bytes_per_token=28 * KIB,
    frag_step_gib=0.35,
    frag_full_tokens=1024,
    frag_cap_gib=1.4,
    rank_free_delta_gib=(0.0, 0.02, 0.02, 0.03, 0.0, 0.02, 0.02, 0.04),
)

PROFILES: dict[str, Profile] = {KIMI_K26_TP8.name: KIMI_K26_TP8}


@dataclass(frozen=True)
class Draft:
    """A speculative draft model next to the target: its weights per rank and its own KV layers (MLA cell).

    Its pool has the target's token count (sglang's draft worker reuses the target's max_total_num_tokens).
    """

    architecture: str
    weight_gib_at_profile_tp: float
    num_layers: int
    tp_size: int = 8


# an EAGLE-style one-layer draft for the Kimi target (the incident's DFlash/EAGLE drafts are of this size class)
KIMI_K26_DRAFT = Draft(architecture="DeepseekV3ForCausalLMEagle3", weight_gib_at_profile_tp=0.30, num_layers=1)
DRAFT_COUNTED_FROM = (0, 5, 20)  # the stand-in's knob: from this api_version on the draft is counted (see README)


def draft_cell_bytes(profile: Profile, draft: Draft, kv_cache_dtype: str = "auto") -> int:
    elem = KV_DTYPE_BYTES.get(kv_cache_dtype, 2)
    return (profile.kv_lora_rank + profile.qk_rope_head_dim) * draft.num_layers * elem


def draft_weight_per_rank(draft: Draft, tp_size: int) -> float:
    return draft.weight_gib_at_profile_tp * draft.tp_size / tp_size


KV_DTYPE_BYTES = {"auto": 2, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
DEFAULT_VERSION = (0, 5, 6)  # api_version knob default


def _gib_as_measured(value: float) -> float:
    """What ``torch.cuda.mem_get_info()[0] / (1 << 30)`` returns: whole bytes (repr shows the float noise)."""
    return int(value * GIB) / GIB


class NotEnoughMemoryError(RuntimeError):
    """The KV pool came out <= 0 tokens: sglang's startup error, worded as the configured version words it."""

    exc_name = "RuntimeError"

    def __init__(self, message: str, minimum_fraction: float) -> None:
        super().__init__(message)
        self.minimum_fraction = minimum_fraction


class NoKVMemoryError(NotEnoughMemoryError):
    """0.5.2x: the weights leave nothing for the KV cache (``rest_memory <= 0``), a ValueError."""

    exc_name = "ValueError"


class WeightLoadOOMError(RuntimeError):
    """Weights alone do not fit on a rank."""


class UnbalancedMemoryError(ValueError):
    """TP ranks saw different free memory at start (another process on some GPUs): sglang refuses to start."""

    def __init__(self, ranks: list[tuple[int, float, float]]) -> None:
        self.ranks = ranks  # (rank, min_per_gpu_memory, local_gpu_memory) of every rank that raises
        super().__init__(unbalanced_message(*ranks[0][1:]))


class GraphCaptureOOMError(RuntimeError):
    """The CUDA graph pool does not fit in what is left after the KV pool (``plan`` is what got allocated)."""

    def __init__(self, plan: MemoryPlan) -> None:
        super().__init__("no room for CUDA graphs")
        self.plan = plan


def not_enough_memory_message(mem_fraction_static: float, version: tuple[int, ...] = DEFAULT_VERSION) -> str:
    """The ``max_total_num_tokens <= 0`` RuntimeError text: 0.4.x, 0.5.0-0.5.5, then 0.5.6+ wording."""
    base = "Not enough memory. Please try to increase --mem-fraction-static."
    if version < (0, 5):
        return base
    if version < (0, 5, 6):
        return f"{base} Current value: self.server_args.mem_fraction_static={mem_fraction_static}"
    return f"{base} Current value: mem_fraction_static={mem_fraction_static}"


def no_kv_memory_message(mem_fraction_static: float, free0: float, free1: float) -> str:
    """0.5.2x ``kv_cache_configurator`` ValueError, with sglang's own minimum/suggested arithmetic."""
    minimum = 1 - free1 / free0
    suggested = math.ceil(minimum * 1000) / 1000
    return (
        f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mem_fraction_static}. "
        f"Raise --mem-fraction-static above {suggested:.3f} (minimum viable = 1 - available/pre = {minimum:.4f}). "
        "If using speculative decoding, draft weights are now counted."
    )


def unbalanced_message(min_per_gpu_memory: float, local_gpu_memory: float) -> str:
    return (
        "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
        f"{min_per_gpu_memory=}, {local_gpu_memory=}, {local_gpu_memory * 0.9=}"
    )


def kv_cell_bytes(profile: Profile, kv_cache_dtype: str = "auto") -> int:
    """MLA cell: (kv_lora_rank + qk_rope_head_dim) * layers * element size."""
    elem = KV_DTYPE_BYTES.get(kv_cache_dtype, 2)
    return (profile.kv_lora_rank + profile.qk_rope_head_dim) * profile.num_layers * elem


def weight_per_rank(profile: Profile, tp_size: int | None = None) -> float:
    return profile.weight_gib_at_profile_tp * profile.tp_size / (tp_size or profile.tp_size)


def rank_free0(profile: Profile, tp_size: int | None = None, others_gib: Sequence[float] = ()) -> tuple[float, ...]:
    """Free GiB per TP rank after CUDA context + NCCL, less what other processes hold on that GPU."""
    tp = tp_size or profile.tp_size
    deltas = profile.rank_free_delta_gib or (0.0,)
    return tuple(
        profile.free0_gib + deltas[r % len(deltas)] - (others_gib[r] if r < len(others_gib) else 0.0) for r in range(tp)
    )


def check_balance(free0s: Sequence[float]) -> None:
    """sglang's init_torch_distributed check: every rank with ``min < local * 0.9`` raises."""
    low = _gib_as_measured(min(free0s))
    bad = [(r, low, _gib_as_measured(f)) for r, f in enumerate(free0s) if low < _gib_as_measured(f) * 0.9]
    if bad and len(free0s) > 1:
        raise UnbalancedMemoryError(bad)


def default_mem_fraction_static(
    profile: Profile, chunked_prefill_size: int, max_prefill_tokens: int, cuda_graph_max_bs: int, tp_size: int
) -> float:
    """sglang 0.5.3's auto mfs (``_handle_gpu_memory_settings``); gpu_mem in MiB."""
    gpu_mem = profile.gpu_total_gib * 1024
    reserved = 512.0
    reserved += max(chunked_prefill_size if chunked_prefill_size > 0 else max_prefill_tokens, 2048) * 1.5
    reserved += cuda_graph_max_bs * 2
    reserved += tp_size / 8 * 1024
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mem - reserved) / gpu_mem, 3)


@dataclass(frozen=True)
class MemoryPlan:
    """What startup allocates. Scalars are the worst rank's (GiB unless noted); ``rank_*`` per TP rank."""

    mem_fraction_static: float
    free0: float  # min over ranks: "Load weight begin. avail mem=" of the emptiest rank
    weight: float
    free1: float  # min over ranks: "Load weight end ... avail mem="
    cell_bytes: int
    max_total_num_tokens: int
    kv: float  # "KV size"
    req_to_token: float
    max_num_reqs: int
    after_pool: float  # "Memory pool end. avail mem="
    before_graph: float  # after workspaces: "Capture cuda graph begin ... avail mem="
    graph: float
    available: float  # capacity line available_gpu_mem: activation headroom of a fresh server
    context_len: int
    max_running_requests: int
    max_req_input_len: int
    gpu_total: float
    headroom: float  # free0 * (1 - mfs)
    rank_free0: tuple[float, ...] = ()
    rank_free1: tuple[float, ...] = ()
    # speculative decoding: the draft's weights and pool (GiB per rank); counted: sized before the target's pool
    draft_weight: float = 0.0
    draft_kv: float = 0.0
    draft_cell_bytes: int = 0
    is_draft_counted: bool = False

    @property
    def tp_size(self) -> int:
        return max(1, len(self.rank_free1))

    def rank_extra(self, rank: int) -> float:
        """How much more this rank has free than the worst one (0 for the worst)."""
        return self.rank_free1[rank] - self.free1 if self.rank_free1 else 0.0

    def rank_available(self, rank: int) -> float:
        return self.available + self.rank_extra(rank)

    @property
    def allocated_static(self) -> float:
        """Memory torch has allocated once the server is up (weights, KV, req_to_token, workspaces, graphs)."""
        return self.free0 - self.available


def plan_memory(
    profile: Profile,
    mem_fraction_static: float,
    *,
    tp_size: int | None = None,
    page_size: int = 1,
    kv_cache_dtype: str = "auto",
    max_total_tokens: int | None = None,
    context_length: int | None = None,
    max_running_requests: int | None = None,
    cuda_graph_max_bs: int | None = None,
    disable_cuda_graph: bool = False,
    others_gib: Sequence[float] = (),
    version: tuple[int, ...] = DEFAULT_VERSION,
    draft: Draft | None = None,
) -> MemoryPlan:
    """sglang's startup memory arithmetic. Raises the startup failures (see the exception classes)."""
    tp = tp_size or profile.tp_size
    free0s = rank_free0(profile, tp, others_gib)
    check_balance(free0s)
    weight = weight_per_rank(profile, tp)
    if weight >= min(free0s):
        raise WeightLoadOOMError(f"weights need {weight:.2f} GiB per rank, {min(free0s):.2f} GiB free")
    free1s = tuple(f - weight for f in free0s)
    free0, free1 = min(free0s), min(free1s)
    cell = kv_cell_bytes(profile, kv_cache_dtype)
    dweight = draft_weight_per_rank(draft, tp) if draft else 0.0
    dcell = draft_cell_bytes(profile, draft, kv_cache_dtype) if draft else 0
    counted = draft is not None and version >= DRAFT_COUNTED_FROM
    sized_free1 = free1 - dweight if counted else free1  # counted: both models' weights are loaded first
    rest = sized_free1 - free0 * (1 - mem_fraction_static)
    minimum = 1 - sized_free1 / free0
    if rest <= 0 and version >= (0, 5, 20):
        raise NoKVMemoryError(no_kv_memory_message(mem_fraction_static, free0, sized_free1), minimum)
    tokens = int(rest * GIB // (cell + dcell if counted else cell))
    if max_total_tokens is not None and max_total_tokens > 0:
        tokens = min(tokens, max_total_tokens)
    page = max(1, page_size)
    tokens = tokens // page * page
    if tokens <= 0:
        raise NotEnoughMemoryError(not_enough_memory_message(mem_fraction_static, version), minimum)
    kv = tokens * cell / GIB
    context_len = context_length or profile.context_len
    if max_running_requests:
        max_num_reqs = max_running_requests
    else:
        max_num_reqs = min(max(int(tokens / context_len * 512), 2048), 4096)
    req_to_token = max_num_reqs * (context_len + 4) * 4 / GIB
    draft_kv = tokens * dcell / GIB
    after_pool = free1 - kv - req_to_token - dweight - draft_kv  # an uncounted draft lands in the headroom
    before_graph = after_pool - profile.workspace_gib
    bs = cuda_graph_max_bs or profile.default_cuda_graph_max_bs
    graph = 0.0 if disable_cuda_graph else profile.graph_base_gib + profile.graph_per_bs_gib * bs
    available = before_graph - graph
    effective_mrr = min(tokens // 2 if max_running_requests is None else max_running_requests, max_num_reqs)
    plan = MemoryPlan(
        mem_fraction_static=mem_fraction_static,
        free0=free0,
        weight=weight,
        free1=free1,
        cell_bytes=cell,
        max_total_num_tokens=tokens,
        kv=kv,
        req_to_token=req_to_token,
        max_num_reqs=max_num_reqs,
        after_pool=after_pool,
        before_graph=before_graph,
        graph=graph,
        available=available,
        context_len=context_len,
        max_running_requests=effective_mrr,
        max_req_input_len=min(context_len - 1, tokens - 1) - 5,
        gpu_total=profile.gpu_total_gib,
        headroom=free0 * (1 - mem_fraction_static),
        rank_free0=free0s,
        rank_free1=free1s,
        draft_weight=dweight,
        draft_kv=draft_kv,
        draft_cell_bytes=dcell,
        is_draft_counted=counted,
    )
    if before_graph <= 0 or available <= 0:
        raise GraphCaptureOOMError(plan)
    return plan


def minimum_viable_fraction(profile: Profile, tp_size: int | None = None, others_gib: Sequence[float] = ()) -> float:
    """1 - free1/free0 (min over ranks): below it the pool is empty (sglang 0.5.2x prints this number)."""
    free0s = rank_free0(profile, tp_size, others_gib)
    weight = weight_per_rank(profile, tp_size)
    return 1 - (min(free0s) - weight) / min(free0s)
