"""The pure budget model: sglang's KV-pool arithmetic from real startup lines, calibration, properties."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.capacity.pool import (
    GIB,
    BudgetModel,
    CalibrationError,
    Measured,
    Unmodelled,
    calibrate,
    max_req_input_len,
    model_from_server,
    offline_model,
)
from remediate.core.startup import ServerSettings, StartupNumbers, parse_server_info, parse_startup

LOGS = Path(__file__).resolve().parents[3] / "data" / "budget_logs"
CORE = Path(__file__).resolve().parents[4] / "src" / "remediate" / "core"


def lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def model(startup: StartupNumbers, settings_: ServerSettings | None = None, **kw: object) -> BudgetModel:
    built = model_from_server(startup, settings_, **kw)  # type: ignore[arg-type]
    assert isinstance(built, BudgetModel), built
    return built


# ----------------------------------------------------------------------------------------- parsing


def test_qwen3_tp2_startup_numbers_are_the_minimum_over_ranks() -> None:
    numbers = parse_startup(lines("qwen3-14b-tp2.log"))
    assert numbers.free0_gib == 18.73  # TP0 18.73, TP1 19.15
    assert numbers.free1_gib == 17.22  # TP0 17.22, TP1 17.64
    assert numbers.kv_tokens == 139814
    assert numbers.kv_gib == pytest.approx(10.66)
    assert numbers.is_mla is False
    assert numbers.ranks == ("TP0", "TP1")
    assert numbers.server_args["mem_fraction_static"] == 0.65
    assert numbers.server_args["tp_size"] == 2
    assert numbers.server_args["chunked_prefill_size"] == 2048
    assert numbers.max_total_num_tokens is None  # the excerpt ends during graph capture


def test_qwen3_14b_tp2_predicts_139814_from_the_logged_numbers() -> None:
    """sglang mem_cache/kv_cache_configurator.py ``_profile_available_bytes``:
    free0 18.73, free1 17.22, cell 4*128*2*40*2 = 81,920 B at 0.65 -> #tokens 139,814."""
    numbers = parse_startup(lines("qwen3-14b-tp2.log"))
    for cell in (81920, None):  # the model config's cell, and the cell read off the K/V sizes
        raw = model(numbers, anchor=False, cell_bytes=cell)
        predicted = raw.predict(0.65).tokens
        assert predicted == pytest.approx(139814, rel=0.001), (cell, predicted)
    assert model(numbers).predict(0.65).tokens == 139814  # anchored on the pool the server allocated


def test_standin_journal_with_journald_prefix() -> None:
    numbers = parse_startup(lines("standin-kimi-k2.6-tp8-0.93.journal"))
    assert (numbers.free0_gib, numbers.free1_gib) == (91.60, 19.17)
    assert numbers.kv_tokens == numbers.max_total_num_tokens == 195011
    assert numbers.is_mla is True and numbers.kv_gib == 12.76
    assert numbers.chunked_prefill_size == -1  # chunking off
    assert numbers.max_running_requests == 2048
    assert numbers.context_len == 262144
    assert numbers.available_gpu_mem_gib == 1.92
    assert numbers.server_args["model_path"] == "moonshotai/Kimi-K2.6"


@pytest.mark.parametrize(
    ("line", "tokens", "gib", "mla"),
    [
        ("KV Cache is allocated. #tokens: 139814, K size: 5.33 GB, V size: 5.33 GB", 139814, 10.66, False),
        ("KV Cache is allocated. #tokens: 195011, KV size: 12.76 GB", 195011, 12.76, True),
        (  # 0.5.13-0.5.15
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 50000, K size: 1.00 GB, V size: 1.00 GB",
            50000,
            2.0,
            False,
        ),
        (  # 0.5.18+ post-capture sizing, labelled cache
            "Full KV Cache VA upper bound. dtype: torch.float8_e4m3fn, #tokens: 8192, K size: 0.25 GB, V size: 0.25 GB",
            8192,
            0.5,
            False,
        ),
    ],
)
def test_kv_allocation_line_forms(line: str, tokens: int, gib: float, mla: bool) -> None:
    numbers = parse_startup([f"[2026-12-01 09:00:00 DP0 TP3] {line}"])
    assert (numbers.kv_tokens, numbers.kv_gib, numbers.is_mla) == (tokens, pytest.approx(gib), mla)
    assert numbers.ranks == ("DP0 TP3",)


def test_only_the_last_start_counts() -> None:
    first = lines("standin-kimi-k2.6-tp8-0.94.journal")
    second = lines("standin-kimi-k2.6-tp8-0.93.journal")
    numbers = parse_startup(
        first + ["Dec 01 09:07:00 gpu-01 systemd[1]: sglang.service: Scheduled restart job"] + second
    )
    assert numbers.max_total_num_tokens == 195011
    assert numbers.server_args["mem_fraction_static"] == 0.93


def test_a_repeated_load_begin_on_one_rank_starts_over_without_server_args() -> None:
    end = "[t TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem={} GB, mem usage=10.00 GB."
    first = ["[t TP0] Load weight begin. avail mem=40.00 GB", end.format("30.00")]
    second = ["[t TP0] Load weight begin. avail mem=39.00 GB", end.format("29.00")]
    assert (parse_startup(first + second).free0_gib, parse_startup(first + second).free1_gib) == (39.0, 29.0)


def test_a_start_still_loading_does_not_hide_the_previous_one() -> None:
    done = lines("standin-kimi-k2.6-tp8-0.94.journal")
    loading = [line for line in lines("standin-kimi-k2.6-tp8-0.93.journal") if "Load weight end" not in line][:6]
    assert any("Load weight begin" in line for line in loading)
    numbers = parse_startup(done + loading)
    assert numbers.max_total_num_tokens == 209007 and numbers.server_args["mem_fraction_static"] == 0.94
    assert parse_startup(loading).free1_gib is None  # nothing earlier: the incomplete start as it is


def test_interleaved_ranks_and_garbage() -> None:
    text = [
        "\x00\xff garbage",
        "[2026-12-01 09:00:00 TP1] Load weight begin. avail mem=79.10 GB",
        "Traceback (most recent call last):",
        "[2026-12-01 09:00:00 TP0] Load weight begin. avail mem=78.90 GB",
        "[2026-12-01 09:00:09 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.00 GB, "
        "mem usage=16.90 GB.",
        "[2026-12-01 09:00:09 TP1] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=61.80 GB, "
        "mem usage=17.30 GB.",
        "max_total_num_tokens=oops",
    ]
    numbers = parse_startup(text)
    assert (numbers.free0_gib, numbers.free1_gib) == (78.90, 61.80)
    assert numbers.max_total_num_tokens is None


@given(st.lists(st.text(max_size=200), max_size=20))
@settings(max_examples=200, deadline=None)
def test_parse_startup_never_raises(text: list[str]) -> None:
    parse_startup(text)


@given(st.data())
@settings(max_examples=200, deadline=None)
def test_real_lines_cut_anywhere_never_raise_and_never_invent(data: st.DataObject) -> None:
    real = lines("qwen3-14b-tp2.log") + lines("standin-incident-crash-0.94.journal")
    cut = [line[: data.draw(st.integers(0, len(line)))] for line in real]
    numbers = parse_startup(cut)
    assert numbers.free0_gib in {None, 18.73, 19.15, 91.6}  # a number is only read when its line is whole
    assert numbers.free1_gib in {None, 17.22, 17.64, 19.17}
    assert numbers.kv_tokens in {None, 139814, 209007}
    assert numbers.max_total_num_tokens in {None, 209007}


def test_server_info_shape() -> None:
    info = {
        "mem_fraction_static": 0.93,
        "chunked_prefill_size": -1,
        "page_size": 16,
        "max_total_tokens": None,
        "max_total_num_tokens": 195011,
        "context_length": None,
        "max_req_input_len": 195005,
        "max_running_requests": None,
        "tp_size": 8,
        "model_path": "moonshotai/Kimi-K2.6",
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3,
        "internal_states": [{"memory_usage": {"weight": 72.43, "kvcache": 12.76, "token_capacity": 195011}}],
    }
    parsed = parse_server_info(info)
    assert parsed.mem_fraction_static == 0.93
    assert (parsed.chunked_prefill_size, parsed.page_size, parsed.max_total_tokens) == (-1, 16, None)
    assert (parsed.max_total_num_tokens, parsed.max_req_input_len, parsed.tp_size) == (195011, 195005, 8)
    assert parsed.speculative_algorithm == "EAGLE" and parsed.speculative_num_steps == 3
    assert parsed.kvcache_gib == 12.76
    wrong = parse_server_info({"mem_fraction_static": "x", "page_size": True, "internal_states": "no"})
    assert wrong.mem_fraction_static is None and wrong.page_size == 1 and wrong.kvcache_gib is None


# ------------------------------------------------------------------------------------------- model


def test_standin_pool_for_every_fraction_from_one_start() -> None:
    """From the stand-in's 0.93 start: 0.94 -> 209,007 (its README), the minimum viable fraction 0.79 -> 0.80."""
    built = model(parse_startup(lines("standin-kimi-k2.6-tp8-0.93.journal")))
    assert built.predict(0.93).tokens == 195011
    assert built.predict(0.94).tokens == pytest.approx(209007, rel=0.0005)
    assert built.predict(0.80).tokens == pytest.approx(13059, rel=0.005)
    assert 0.79 < built.min_viable_fraction() < 0.80
    failure = built.predict(0.79)
    assert not failure.is_viable and failure.tokens == 0 and "increase --mem-fraction-static" in str(failure.failure)
    assert built.predict(0.94).max_req_input_len == pytest.approx(209001, abs=20)
    assert built.headroom_bytes(0.94) == int(91.60 * 0.06 * GIB)
    assert built.overhead_gib == pytest.approx(91.60 * 0.07 - 1.92)


def test_raw_model_from_the_stand_in_log_is_within_half_a_percent() -> None:
    raw = model(parse_startup(lines("standin-kimi-k2.6-tp8-0.93.journal")), anchor=False)
    for fraction, reported in ((0.92, 181015), (0.93, 195011), (0.94, 209007)):
        assert raw.predict(fraction).tokens == pytest.approx(reported, rel=0.005)


def test_page_rounding_and_the_cap() -> None:
    base = offline_model(gpu_mem_gib=80.0, free_after_weights_gib=60.0, cell_bytes=131072, page_size=64)
    prediction = base.predict(0.9)
    assert prediction.tokens % 64 == 0
    assert prediction.tokens == int((60.0 - 8.0) * GIB / 131072) // 64 * 64
    capped = offline_model(
        gpu_mem_gib=80.0, free_after_weights_gib=60.0, cell_bytes=131072, page_size=64, max_total_tokens=100_000
    )
    assert capped.predict(0.9).tokens == 100_000 // 64 * 64 and capped.predict(0.9).is_capped
    assert capped.fraction_for_tokens(200_000) is None
    assert base.fraction_for_tokens(base.predict(0.9).tokens) == pytest.approx(0.9, abs=0.001)


def test_max_req_input_len_like_sglang() -> None:
    assert max_req_input_len(195011, 262144) == 195005
    assert max_req_input_len(300000, 131072) == 131066
    assert max_req_input_len(195011, None) == 195005
    assert max_req_input_len(3, None) == 0


def test_unmodelled_without_startup_numbers() -> None:
    assert isinstance(model_from_server(None, ServerSettings(mem_fraction_static=0.9)), Unmodelled)
    no_cell = StartupNumbers(free0_gib=80.0, free1_gib=60.0)
    assert "cell" in str(model_from_server(no_cell, None))
    assert isinstance(model_from_server(no_cell, None, cell_bytes=1000.0), BudgetModel)


def test_cell_from_server_info_kvcache_and_from_pool_size() -> None:
    numbers = StartupNumbers(free0_gib=91.60, free1_gib=19.17)
    info = ServerSettings(mem_fraction_static=0.93, max_total_num_tokens=195011, kvcache_gib=12.76)
    assert model(numbers, info).cell_bytes == pytest.approx(70272, rel=0.001)
    bare = ServerSettings(mem_fraction_static=0.93, max_total_num_tokens=195011)
    assert model(numbers, bare).cell_bytes == pytest.approx(70272, rel=0.002)
    assert model(numbers, bare).predict(0.94).tokens == pytest.approx(209007, rel=0.005)


def test_a_capped_pool_is_not_an_anchor() -> None:
    numbers = StartupNumbers(free0_gib=91.60, free1_gib=19.17, kv_tokens=100000, kv_gib=100000 * 70272 / GIB)
    info = ServerSettings(mem_fraction_static=0.93, max_total_num_tokens=100000, max_total_tokens=100000)
    built = model(numbers, info)
    assert built.anchor is None and any("cap" in n for n in built.notes)
    assert built.predict(0.95).tokens == 100000


# -------------------------------------------------------------------------------------- calibration


def test_calibration_reports_the_error_it_had_and_then_fits() -> None:
    raw = model(parse_startup(lines("standin-kimi-k2.6-tp8-0.93.journal")), anchor=False)
    corrected, errors = calibrate(raw, [Measured(0.93, 195011, "oom")])
    assert len(errors) == 1 and errors[0].measured == 195011
    assert errors[0].predicted == raw.predict(0.93).tokens
    assert str(errors[0]).startswith(f"predicted {raw.predict(0.93).tokens:,}, measured 195,011: \N{MINUS SIGN}0.0")
    assert corrected.predict(0.93).tokens == 195011
    assert corrected.predict(0.94).tokens == pytest.approx(209007, abs=30)
    two, _ = calibrate(raw, [Measured(0.93, 195011), Measured(0.94, 209007)])
    assert two.predict(0.92).tokens == pytest.approx(181015, abs=3)
    assert two.predict(0.95).tokens == pytest.approx(223004, abs=3)


def test_calibration_error_text() -> None:
    assert str(CalibrationError(0.93, 195002, 195011)) == "predicted 195,002, measured 195,011: \N{MINUS SIGN}0.005%"
    assert str(CalibrationError(0.93, 195100, 195000)) == "predicted 195,100, measured 195,000: +0.051%"


def test_calibration_ignores_capped_and_empty() -> None:
    capped = offline_model(gpu_mem_gib=80.0, free_after_weights_gib=60.0, cell_bytes=131072, max_total_tokens=1000)
    same, errors = calibrate(capped, [Measured(0.9, 1000), Measured(0.9, 0)])
    assert same == capped and errors == ()


# ---------------------------------------------------------------------------------------- properties

models = st.builds(
    offline_model,
    gpu_mem_gib=st.floats(8.0, 200.0),
    free_after_weights_gib=st.floats(0.5, 200.0),
    cell_bytes=st.floats(1024.0, 2_000_000.0),
    page_size=st.sampled_from([1, 16, 32, 64, 128]),
    max_total_tokens=st.none() | st.integers(1, 5_000_000),
).filter(lambda m: m.free1_gib < m.free0_gib)
fractions = st.floats(0.01, 0.99)


@given(models, fractions, fractions)
@settings(max_examples=300, deadline=None)
def test_monotone_page_aligned_never_negative(m: BudgetModel, f1: float, f2: float) -> None:
    low, high = sorted((f1, f2))
    a, b = m.predict(low), m.predict(high)
    assert a.tokens <= b.tokens
    assert a.tokens >= 0 and a.tokens % m.page_size == 0 and b.tokens % m.page_size == 0
    assert a.headroom_bytes >= b.headroom_bytes
    assert a.max_req_input_len >= 0


@given(models, fractions)
@settings(max_examples=300, deadline=None)
def test_below_the_minimum_viable_fraction_it_predicts_the_startup_failure(m: BudgetModel, f: float) -> None:
    prediction = m.predict(f)
    viable = m.min_viable_fraction()
    if f < viable - 1e-9:
        assert not prediction.is_viable and prediction.tokens == 0 and prediction.failure
    elif f > viable + 1e-9:
        assert prediction.is_viable and prediction.tokens >= m.page_size


# -------------------------------------------------------------------------------------------- purity

FORBIDDEN = {"os", "pathlib", "io", "subprocess", "socket", "shutil", "tempfile", "time", "datetime", "click"}


@pytest.mark.parametrize(
    "path",
    sorted(p for d in (CORE, CORE / "budget", CORE / "bench") for p in d.glob("*.py")),
    ids=lambda p: str(p.relative_to(CORE)),
)
def test_core_modules_do_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, (path.name, name)
                assert not name.startswith("remediate.") or name.startswith(("remediate.core", "remediate.errors"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"open", "exec", "eval", "__import__"}


def test_context_length_from_max_req_input_len() -> None:
    numbers = StartupNumbers(free0_gib=91.60, free1_gib=19.17, kv_tokens=195011, kv_gib=12.76)
    short = ServerSettings(mem_fraction_static=0.93, max_total_num_tokens=195011, max_req_input_len=131066)
    assert model(numbers, short).context_len == 131072
    assert model(numbers, short).predict(0.94).max_req_input_len == 131066
    pool_bound = ServerSettings(mem_fraction_static=0.93, max_total_num_tokens=195011, max_req_input_len=195005)
    assert model(numbers, pool_bound).context_len is None  # the pool, not the context, set it
