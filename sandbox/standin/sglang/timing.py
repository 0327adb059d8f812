"""Pure timing model: simulated seconds for prefill and decode, falling with context length.

Decode: the time per output token is a quadratic in the context length fitted exactly through the
incident's measurements (118.6 tok/s at 1.4k context, 19.9 at 11k, 6.3 at 32k) and continued linearly
(with the same slope) beyond 32k, so it stays smooth and monotone: ~365 tok/s at an empty context,
~2.9 tok/s at 64k, ~1.0 tok/s at 185k.

Prefill: throughput for a P-token prompt is 1 / (T0 + K * P): exactly 9,000 tok/s at 1k and 2,500 tok/s
at 185k, plus a fixed per-forward overhead.
"""

from __future__ import annotations

_A = 0.002740392957634418
_B = 4.028187552092495e-06
_C = 2.645289463434033e-11
_KNEE = 32000.0
_T_KNEE = _A + _B * _KNEE + _C * _KNEE * _KNEE
_SLOPE_KNEE = _B + 2 * _C * _KNEE

_T0 = 1 / 9000 - 1000 * (1 / 2500 - 1 / 9000) / 184000
_K = (1 / 2500 - 1 / 9000) / 184000
FORWARD_OVERHEAD_S = 0.02


def decode_token_seconds(context: int) -> float:
    """Seconds for one decode step of one request whose context (prompt + generated) is ``context``."""
    x = float(max(0, context))
    if x <= _KNEE:
        return _A + _B * x + _C * x * x
    return _T_KNEE + _SLOPE_KNEE * (x - _KNEE)


def decode_rate(context: int) -> float:
    return 1.0 / decode_token_seconds(context)


def prefill_rate(prompt_tokens: int) -> float:
    """Prefill throughput (tok/s) of a prompt of this many tokens."""
    return 1.0 / (_T0 + _K * max(1, prompt_tokens))


def prefill_seconds(new_tokens: int, cached_tokens: int = 0) -> float:
    """Seconds to prefill ``new_tokens`` on top of ``cached_tokens`` of cached prefix."""
    if new_tokens <= 0:
        return FORWARD_OVERHEAD_S
    total = new_tokens + cached_tokens
    return FORWARD_OVERHEAD_S + new_tokens / prefill_rate(total)
