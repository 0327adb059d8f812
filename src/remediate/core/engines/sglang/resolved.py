"""PURE: what sglang makes of the unit's values before it runs them — the resolved fraction, and whether the
fraction still sizes the pool at all.

Two rules of sglang 0.5.23 change what ``--mem-fraction-static`` means for a unit:

- **The aiter factor.** sglang arg_groups/attention_hook.py ``handle_attention_backend_compatibility``: when the
  resolved ``attention_backend`` is ``"aiter"`` (AMD ROCm) and ``model_config.context_len > 8192``, the fraction
  is replaced by ``mem_fraction_static * 0.85`` — an explicit ``--mem-fraction-static`` too, unless
  ``SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION`` is true *and* the fraction was given (``_raw_input``); a default
  fraction is always scaled. The server's ``/server_info`` reports the scaled value (``ServerArgs.resolved_dict``),
  so a unit that writes 0.93 runs at 0.7905. sglang 0.5.3 (server_args.py) has no such factor.
- **Post-capture KV sizing.** sglang arg_groups/overrides.py ``post_capture_kv_sizing_planned``: with
  ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING`` true (and a CUDA device, no MLA, graphs for the largest prefill, …) the
  pool first reserves a virtual upper bound ("KV Cache VA upper bound", mem_cache/memory_pool.py
  ``_finalize_allocation_log``) and is sized from the memory measured free after CUDA-graph capture
  (model_executor/model_runner_components/kv_pool_runtime.py ``compute_post_capture_kv_resize``): the fraction no
  longer predicts the pool.

The GPU vendor is not in the unit: the server's report (its resolved ``attention_backend``) says whether aiter
runs; before the server answers, the factor is "possible", never assumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

AITER_FACTOR = Decimal("0.85")  # attention_hook.py: cfg.mem_fraction_static * 0.85
AITER_CONTEXT = 8192  # attention_hook.py: model_config.context_len > 8192
AITER_BACKEND = "aiter"
HONOR_ENV = "SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION"  # environ.py: EnvBool(False)
POST_CAPTURE_ENV = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"  # environ.py: EnvBool(False)
FACTOR_SINCE = (0, 5, 23)  # the first release read to hold the factor (0.5.3 does not; between: unknown)
FACTOR_ABSENT_UP_TO = (0, 5, 3)
# sglang environ.py ``EnvBool.parse``: these words (any case) and nothing else; any other text raises there.
_TRUE = ("true", "1", "yes", "y")
_FALSE = ("false", "0", "no", "n")


def env_bool(value: str | None) -> bool | None:
    """sglang's reading of a boolean environment variable (environ.py ``EnvBool.parse``): None when unset or not
    a word it takes (sglang would refuse to start on it)."""
    if value is None:
        return None
    word = value.strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


def has_factor(version: tuple[int, ...] | None) -> bool | None:
    """Whether this sglang release scales the fraction under aiter: None when the version is unknown or unread."""
    if version is None:
        return None
    if version >= FACTOR_SINCE:
        return True
    return False if version <= FACTOR_ABSENT_UP_TO else None


@dataclass(frozen=True)
class ResolvedFraction:
    """What the server should report for a written fraction: ``expected`` (the factor applied when it is known
    to apply), ``accepted`` (every value the unit can explain: both the written and the scaled one when it is not
    known whether the factor applies), and ``why`` (the rule, named, when the factor is in play)."""

    written: Decimal
    expected: Decimal
    accepted: tuple[Decimal, ...]
    why: str | None = None

    def explains(self, reported: Decimal) -> bool:
        return any(_close(reported, value) for value in self.accepted)

    def note(self, reported: Decimal) -> str | None:
        """What to tell the user when the server reports ``reported``: the factor's effect, when it had one."""
        if self.why is None or not _close(reported, scaled(self.written)) or _close(reported, self.written):
            return None
        return f"the server runs --mem-fraction-static {self.written} as {float(reported):.6g}: {self.why}"


def scaled(written: Decimal) -> Decimal:
    return written * AITER_FACTOR


def _close(a: Decimal, b: Decimal) -> bool:
    # The server reports a float (0.93 * 0.85 = 0.7905000000000001): equal to 1e-9.
    return abs(a - b) <= Decimal("1e-9")


def factor_rule(written: Decimal, context_len: int | None) -> str:
    """The rule as one clause, for notes and warnings."""
    context = f"context length {context_len:,}" if context_len is not None else "a context length over 8,192"
    return (
        f"sglang scales it by 0.85 (attention backend aiter, {context}; sglang arg_groups/attention_hook.py) "
        f"to {scaled(written).normalize()}; {HONOR_ENV}=1 keeps the written value"
    )


def resolve_fraction(
    written: str | Decimal,
    *,
    attention_backend: str | None,
    context_len: int | None,
    env: Mapping[str, str | None],
    version: tuple[int, ...] | None = None,
) -> ResolvedFraction | None:
    """The value the server should resolve ``written`` (the unit's explicit ``--mem-fraction-static``) to.

    ``attention_backend``: the server's resolved backend (``/server_info``), None when unknown; ``context_len``:
    the model's context length when known (``context_length`` or the capacity line); ``env``: the unit's
    environment; ``version``: the server's sglang version when read. None for a value that is not a number."""
    try:
        value = Decimal(str(written))
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    exact = ResolvedFraction(value, value, (value,))
    if attention_backend is not None and attention_backend != AITER_BACKEND:
        return exact
    if context_len is not None and context_len <= AITER_CONTEXT:
        return exact
    if env_bool(env.get(HONOR_ENV)) is True:
        return exact  # explicit and honoured: attention_hook.py logs a warning and keeps it
    if has_factor(version) is False:
        return exact
    why = factor_rule(value, context_len)
    known = attention_backend == AITER_BACKEND and context_len is not None and has_factor(version) is True
    if known:
        return ResolvedFraction(value, scaled(value), (scaled(value),), why)
    return ResolvedFraction(value, value, (value, scaled(value)), why)


def is_post_capture(env: Mapping[str, str | None]) -> bool:
    """Whether the unit asks sglang to size the pool after CUDA-graph capture (the planner then decides whether it
    can: overrides.py ``post_capture_kv_sizing_planned``; the journal's "VA upper bound" line says it did)."""
    return env_bool(env.get(POST_CAPTURE_ENV)) is True


POST_CAPTURE_RULE = (
    f"{POST_CAPTURE_ENV}=1: sglang sizes the KV pool from the memory free after CUDA-graph capture "
    "(sglang model_runner_components/kv_pool_runtime.py compute_post_capture_kv_resize), not from "
    "--mem-fraction-static"
)


def info_text(info: Mapping[str, Any] | None, key: str) -> str | None:
    """A string field of a ``/server_info`` document (None when absent or not a string)."""
    value = (info or {}).get(key)
    return value if isinstance(value, str) and value else None


def logged_pool(post_capture_tokens: int | None, kv_tokens: int | None, is_kv_pool: bool) -> int | None:
    """The pool a start logged: the post-capture line's ``#tokens`` when sized after capture, else a plain "KV Cache
    is allocated" line's (mem_cache/memory_pool.py ``_finalize_allocation_log`` logs the pool's ``size``, which is
    model_runner's ``max_total_num_tokens``); None for a Full/SWA half or a VA upper bound (not the pool)."""
    if post_capture_tokens is not None:
        return post_capture_tokens
    return kv_tokens if is_kv_pool else None


def pool_mismatch(logged: int | None, reported: int | None) -> str | None:
    """Why the pool logged at the start and the one ``/server_info`` reports (``max_total_num_tokens``) disagree,
    or None when they agree or one is unknown."""
    if logged is None or reported is None or logged == reported:
        return None
    return (
        f"the server's start logged a KV pool of {logged:,} tokens but /server_info reports max_total_num_tokens="
        f"{reported:,}: another server may answer on that port, or the journal holds another start"
    )
