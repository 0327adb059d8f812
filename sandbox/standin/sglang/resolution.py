"""What sglang 0.5.23 makes of the flags before it runs them, where the stand-in models it: the aiter factor on
ROCm and post-capture KV sizing (knob ``platform``: ``cuda`` or ``rocm``; the env switches as sglang reads them).

- sglang arg_groups/model_override_base.py ``get_default_attn_backend``: on HIP an unset --attention-backend
  resolves to ``aiter`` (MHA models; the stand-in's profiles are read as such).
- sglang arg_groups/attention_hook.py ``handle_attention_backend_compatibility``: with ``aiter`` and
  ``model_config.context_len > 8192`` the fraction is scaled by 0.85, an explicit one too unless
  SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION is true (a default one always). /server_info reports the scaled value.
- sglang arg_groups/overrides.py ``post_capture_kv_sizing_planned``: SGLANG_ENABLE_POST_CAPTURE_KV_SIZING on a
  CUDA device with CUDA graphs (no draft here) sizes the pool after graph capture
  (model_runner_components/kv_pool_runtime.py ``compute_post_capture_kv_resize``): the pool line reads
  "KV Cache VA upper bound" and a "Post-capture KV sizing: KV cache allocated" line gives the pool.
"""

from __future__ import annotations

from collections.abc import Mapping

AITER_FACTOR = 0.85
AITER_CONTEXT = 8192
SINCE = (0, 5, 23)


def env_bool(value: str | None) -> bool:
    """sglang environ.py ``EnvBool.parse`` (true words only; unset or anything else: False)."""
    return value is not None and value.strip().lower() in ("true", "1", "yes", "y")


def resolve_backend(sa: dict, platform: str) -> None:
    """An unset --attention-backend on ROCm resolves to aiter (get_default_attn_backend)."""
    if sa.get("attention_backend") is None and platform == "rocm":
        sa["attention_backend"] = "aiter"


def apply_aiter_factor(
    sa: dict, *, explicit: bool, context_len: int, version: tuple[int, ...], env: Mapping[str, str]
) -> None:
    """The resolved fraction under aiter with a long context (handle_attention_backend_compatibility)."""
    if version < SINCE or sa.get("attention_backend") != "aiter" or context_len <= AITER_CONTEXT:
        return
    if explicit and env_bool(env.get("SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION")):
        return  # sglang logs a warning and keeps the explicit value
    sa["mem_fraction_static"] = float(sa["mem_fraction_static"]) * AITER_FACTOR


def post_capture(sa: dict, *, platform: str, version: tuple[int, ...], env: Mapping[str, str], draft: bool) -> bool:
    """Whether this start sizes its pool after CUDA-graph capture (post_capture_kv_sizing_planned, in part)."""
    return (
        version >= SINCE
        and env_bool(env.get("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"))
        and platform == "cuda"
        and not sa.get("disable_cuda_graph")
        and int(sa.get("chunked_prefill_size") or 0) > 0
        and not draft
    )


def post_capture_tokens(upper: int, graph_gib: float, cell_bytes: int, page_size: int) -> int:
    """The pool after capture: the VA upper bound less what the graphs took (whole pages)."""
    page = max(1, page_size)
    taken = int(graph_gib * (1 << 30) // max(1, cell_bytes))
    return max(page, (upper - taken) // page * page)
