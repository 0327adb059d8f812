"""What sglang resolves the unit's fraction to (the aiter factor) and which start line holds the pool."""

from __future__ import annotations

from decimal import Decimal

import pytest

from remediate.core.engines.sglang.resolved import (
    HONOR_ENV,
    POST_CAPTURE_ENV,
    env_bool,
    factor_rule,
    has_factor,
    info_text,
    is_post_capture,
    logged_pool,
    pool_mismatch,
    resolve_fraction,
)
from remediate.core.startup import STARTUP_LINES_ERE, parse_startup

V0523 = (0, 5, 23)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", True), ("TRUE", True), ("y", True), ("yes", True), ("0", False), ("No", False), ("n", False),
     (None, None), ("maybe", None), ("", None)],
)  # fmt: skip
def test_env_bool_reads_what_sglang_environ_envbool_parse_reads(text: str | None, value: bool | None) -> None:
    assert env_bool(text) is value


def test_factor_by_version() -> None:
    assert has_factor(V0523) is True and has_factor((0, 6, 0)) is True
    assert has_factor((0, 5, 3)) is False and has_factor((0, 4, 6)) is False
    assert has_factor((0, 5, 10)) is None and has_factor(None) is None


def test_aiter_long_context_scales_an_explicit_fraction() -> None:
    # sglang 0.5.23 arg_groups/attention_hook.py: mem_fraction_static=cfg.mem_fraction_static * 0.85
    resolved = resolve_fraction("0.93", attention_backend="aiter", context_len=131072, env={}, version=V0523)
    assert resolved is not None
    assert resolved.expected == Decimal("0.7905")
    assert resolved.explains(Decimal(str(0.93 * 0.85)))  # the server's float: 0.7905000000000001
    assert not resolved.explains(Decimal("0.93"))
    note = resolved.note(Decimal("0.7905"))
    assert note is not None and "0.85" in note and "aiter" in note and HONOR_ENV in note
    assert resolved.note(Decimal("0.93")) is None


@pytest.mark.parametrize(
    ("backend", "context", "env"),
    [
        ("flashinfer", 131072, {}),  # CUDA: no factor
        ("aiter", 8192, {}),  # context_len > 8192 only
        ("aiter", 131072, {HONOR_ENV: "1"}),  # explicit and honoured
        ("aiter", 131072, {HONOR_ENV: "true"}),
    ],
)
def test_no_factor(backend: str, context: int, env: dict[str, str | None]) -> None:
    resolved = resolve_fraction("0.93", attention_backend=backend, context_len=context, env=env, version=V0523)
    assert resolved is not None and resolved.accepted == (Decimal("0.93"),) and resolved.why is None


def test_honor_set_to_false_still_scales() -> None:
    resolved = resolve_fraction(
        "0.9", attention_backend="aiter", context_len=32768, env={HONOR_ENV: "0"}, version=V0523
    )
    assert resolved is not None and resolved.expected == Decimal("0.765")


def test_unknown_backend_context_or_version_accepts_both() -> None:
    for backend, context, version in (("aiter", None, V0523), (None, 131072, V0523), ("aiter", 131072, None)):
        resolved = resolve_fraction("0.93", attention_backend=backend, context_len=context, env={}, version=version)
        assert resolved is not None
        assert resolved.accepted == (Decimal("0.93"), Decimal("0.7905"))
        assert resolved.explains(Decimal("0.7905")) and resolved.explains(Decimal("0.93"))
        assert not resolved.explains(Decimal("0.8"))
    old = resolve_fraction("0.93", attention_backend="aiter", context_len=131072, env={}, version=(0, 5, 3))
    assert old is not None and old.accepted == (Decimal("0.93"),)


def test_not_a_number_is_not_resolved() -> None:
    assert resolve_fraction("x", attention_backend="aiter", context_len=None, env={}) is None
    assert resolve_fraction("nan", attention_backend="aiter", context_len=None, env={}) is None


def test_rule_names_the_context() -> None:
    assert "context length 131,072" in factor_rule(Decimal("0.93"), 131072)
    assert "over 8,192" in factor_rule(Decimal("0.93"), None)


def test_post_capture_env() -> None:
    assert is_post_capture({POST_CAPTURE_ENV: "1"})
    assert not is_post_capture({POST_CAPTURE_ENV: "0"}) and not is_post_capture({})


def test_info_text() -> None:
    assert info_text({"attention_backend": "aiter"}, "attention_backend") == "aiter"
    assert info_text({"attention_backend": None}, "attention_backend") is None
    assert info_text(None, "attention_backend") is None


# The lines as sglang 0.5.23 formats them: mem_cache/memory_pool.py ``_finalize_allocation_log`` and
# model_executor/model_runner_components/kv_pool_runtime.py ``compute_post_capture_kv_resize``.
PLAIN = [
    "[2026-12-06 02:00:00 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 195011, K size: 6.70 GB, "
    "V size: 6.70 GB",
    "[2026-12-06 02:00:09 TP0] max_total_num_tokens=195011, chunked_prefill_size=4096, max_prefill_tokens=16384, "
    "max_running_requests=512, context_len=131072, available_gpu_mem=8.10 GB",
]
POST_CAPTURE = [
    "[2026-12-06 02:00:00 TP0] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 260000, K size: 8.93 GB, "
    "V size: 8.93 GB",
    "[2026-12-06 02:00:08 TP0] Post-capture KV sizing: full_layer_tokens=201230, swa_layer_tokens=0",
    "[2026-12-06 02:00:08 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 201230, "
    "KV size: 13.82 GB, avail mem=4.21 GB",
]
HYBRID = [
    "[2026-12-06 02:00:00 TP0] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 100000, "
    "K size: 1.00 GB, V size: 1.00 GB",
]


def test_the_logged_pool_of_each_form() -> None:
    plain = parse_startup(PLAIN)
    assert plain.is_kv_pool and logged_pool(plain.post_capture_tokens, plain.kv_tokens, plain.is_kv_pool) == 195011
    sized = parse_startup(POST_CAPTURE)
    assert not sized.is_kv_pool and sized.post_capture_tokens == 201230
    assert logged_pool(sized.post_capture_tokens, sized.kv_tokens, sized.is_kv_pool) == 201230
    half = parse_startup(HYBRID)
    assert logged_pool(half.post_capture_tokens, half.kv_tokens, half.is_kv_pool) is None


def test_the_startup_grep_keeps_the_post_capture_line() -> None:
    import re

    ere = re.compile(STARTUP_LINES_ERE.replace("[^]]", "[^\\]]"))
    messages = [line.split("] ", 1)[1] for line in POST_CAPTURE]
    assert ere.search(messages[0]) and ere.search(messages[2])
    assert not ere.search(messages[1])


def test_pool_mismatch() -> None:
    assert pool_mismatch(195011, 195011) is None
    assert pool_mismatch(None, 195011) is None and pool_mismatch(195011, None) is None
    problem = pool_mismatch(195011, 120000)
    assert problem is not None and "195,011" in problem and "120,000" in problem and "another server" in problem
