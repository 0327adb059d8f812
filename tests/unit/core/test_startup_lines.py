"""core/startup.py is the one reader of sglang's startup memory lines, its capacity line and /server_info:
plan (parse_startup), diagnose (the run facts), the health wait (parse_capacity_line, tokens_from_info) and
bench read them the same way. Each case here is one that a narrower copy of the parser used to miss."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from remediate.core.diagnosis import parse_journal
from remediate.core.startup import (
    CAPACITY_RE,
    STARTUP_LINES_ERE,
    parse_capacity_line,
    parse_server_info,
    parse_startup,
    tokens_from_info,
)

CAPACITY = (
    "max_total_num_tokens=206635, chunked_prefill_size=2048, "
    "max_prefill_tokens=16384, max_running_requests=6, context_len=262144, available_gpu_mem=1.81 GB"
)
SGLANG_CAPACITY = f"[2026-11-29 07:14:22 TP0] {CAPACITY}"
SGLANG_046_CAPACITY = (
    "[2025-05-01 10:00:00 TP0] max_total_num_tokens=180000, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=4097, context_len=131072"
)
# sglang's logger with another time format: the ranks still tell the prefix (parse_startup always read these).
OTHER_TIME = "[2026-11-29T07:14:22+00:00 TP0] "
START = [
    f"{OTHER_TIME}Load weight begin. avail mem=78.50 GB",
    f"{OTHER_TIME}Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.25 GB, mem usage=18.2 GB.",
    f"{OTHER_TIME}{CAPACITY}",
]


def test_the_capacity_line_sglang_prints() -> None:
    assert parse_capacity_line(["loading weights", SGLANG_CAPACITY, "The server is fired up"]) == 206635
    match = CAPACITY_RE.search(SGLANG_CAPACITY)
    assert match is not None
    assert match.groups() == ("206635", "2048", "16384", "6", "262144", "1.81")


def test_the_046_capacity_line_without_available_mem() -> None:
    match = CAPACITY_RE.search(SGLANG_046_CAPACITY)
    assert match is not None and match.group(6) is None
    assert parse_capacity_line([SGLANG_046_CAPACITY]) == 180000


def test_the_newest_capacity_line_wins_and_none_when_absent() -> None:
    assert parse_capacity_line([SGLANG_046_CAPACITY, SGLANG_CAPACITY]) == 206635
    assert parse_capacity_line(["nothing here"]) is None
    assert parse_capacity_line([]) is None


def test_a_rank_prefix_in_another_time_format_is_read_by_every_caller() -> None:
    """The health wait's capacity line and diagnose's run facts used to miss what plan read."""
    assert parse_startup(START).max_total_num_tokens == 206635
    assert parse_capacity_line(START) == 206635
    (run,) = parse_journal(START).runs
    assert run.max_total_num_tokens == 206635 and run.chunked_prefill_size == 2048
    assert run.free_before_weights_bytes == int(78.5 * (1 << 30))
    assert run.free_after_weights_bytes == int(60.25 * (1 << 30))
    assert run.available_gpu_mem_bytes == round(1.81 * (1 << 30))


@pytest.mark.parametrize(
    "line",
    [
        "[t TP0] Load weight begin. avail mem=1.2.3 GB",
        "[t TP0] Load weight end. type=X, avail mem=4.5.6 GB, mem usage=1.00 GB.",
        "[t TP0] KV Cache is allocated. #tokens: 10, K size: 1.2.3 GB, V size: 1.00 GB",
        f"[t TP0] {CAPACITY.replace('1.81', '1.8.1')}",
        "[t TP0] server_args=ServerArgs(model_path='m', mem_fraction_static=0.9.1, tp_size=2)",
    ],
)
def test_a_number_that_is_not_one_is_not_a_startup_line(line: str) -> None:
    """``[\\d.]+`` read "1.2.3" and float() raised: parse_startup crashed plan on a damaged line."""
    numbers = parse_startup([line])
    assert numbers.free0_gib is None and numbers.free1_gib is None and numbers.kv_tokens is None
    assert "mem_fraction_static" not in numbers.server_args
    parse_journal([line])


def test_server_args_are_read_alike_by_plan_and_diagnose() -> None:
    line = (
        "[2026-11-29 07:14:00] server_args=ServerArgs(model_path='/m', tp_size=2, mem_fraction_static=0.93, "
        "chunked_prefill_size=8192, max_running_requests=48, cuda_graph_max_bs=16, page_size=1)"
    )
    args = parse_startup([line]).server_args
    (run,) = parse_journal([line]).runs
    assert (args["mem_fraction_static"], args["tp_size"], args["chunked_prefill_size"]) == (0.93, 2, 8192)
    assert (run.mem_fraction_static, run.tp_size, run.chunked_prefill_size) == (0.93, 2, 8192)
    assert (run.cuda_graph_max_bs, run.max_running_requests) == (16, 48)


@pytest.mark.parametrize(
    "body",
    [
        {"max_total_num_tokens": 206635, "chunked_prefill_size": 4096},
        {"internal_states": [{"memory_usage": {"token_capacity": 206635}}]},
        {"max_total_num_tokens": 206635.0},
        {"max_total_num_tokens": "206635"},
    ],
    ids=["top-level", "internal_states", "integral-float", "digits"],
)
def test_the_pool_from_server_info_forms(body: dict[str, object]) -> None:
    """The health wait (tokens_from_info) and plan (parse_server_info) read the same pool; plan used to miss
    ``internal_states[0].memory_usage.token_capacity``."""
    assert tokens_from_info(body) == 206635
    assert parse_server_info(body).max_total_num_tokens == 206635


@pytest.mark.parametrize(
    "body",
    [{}, {"max_total_num_tokens": True}, {"max_total_num_tokens": "lots"}, {"internal_states": "no"}],
    ids=["empty", "bool", "text", "bad-states"],
)
def test_no_pool_in_server_info(body: dict[str, object]) -> None:
    """A JSON ``true`` is not 1 token (the health wait read it as 1)."""
    assert tokens_from_info(body) is None
    assert parse_server_info(body).max_total_num_tokens is None


# sglang 0.5.23 (entrypoints/engine.py, ``logger.info(f"server_args={_server_args_for_logging(server_args)}")``)
# logs ServerArgs.resolved_dict(): a dict repr, not the dataclass repr.
DICT_ARGS = (
    "[2026-12-01 09:00:00] server_args={'model_path': 'moonshotai/Kimi-K2.6', 'tokenizer_path': "
    "'moonshotai/Kimi-K2.6', 'tp_size': 8, 'mem_fraction_static': 0.94, 'max_running_requests': None, "
    "'max_total_tokens': None, 'chunked_prefill_size': 4096, 'page_size': 1, 'cuda_graph_max_bs': 256, "
    "'speculative_algorithm': 'EAGLE', 'api_key': None, 'enable_dp_attention': False}"
)


def test_the_0_5_23_dict_of_server_args_is_read_like_the_dataclass_repr() -> None:
    args = parse_startup([DICT_ARGS]).server_args
    assert args == {
        "mem_fraction_static": 0.94,
        "page_size": 1,
        "chunked_prefill_size": 4096,
        "cuda_graph_max_bs": 256,
        "tp_size": 8,
        "model_path": "moonshotai/Kimi-K2.6",
        "speculative_algorithm": "EAGLE",
    }
    (run,) = parse_journal([DICT_ARGS]).runs
    assert (run.mem_fraction_static, run.tp_size, run.chunked_prefill_size) == (0.94, 8, 4096)


def test_a_0_5_23_start_begins_a_new_run() -> None:
    first = DICT_ARGS
    second = DICT_ARGS.replace("'mem_fraction_static': 0.94", "'mem_fraction_static': 0.93")
    runs = parse_journal([first, SGLANG_CAPACITY, second]).runs
    assert [r.mem_fraction_static for r in runs] == [0.94, 0.93]
    assert parse_startup([first, SGLANG_CAPACITY, second]).server_args["mem_fraction_static"] == 0.93


def test_a_value_that_quotes_a_key_is_not_the_key() -> None:
    line = "server_args={'model_path': \"/m, 'tp_size': 99\", 'tp_size': 2}"
    assert parse_startup([line]).server_args["tp_size"] == 2


def test_the_hosts_journal_filter_keeps_the_0_5_23_args_line() -> None:
    """host/plan/budget.py reads the journal through ``grep -E STARTUP_LINES_ERE``: the dict form must pass it."""
    if shutil.which("grep") is None:
        pytest.skip("no grep")
    text = "\n".join([DICT_ARGS.split("] ", 1)[1], "a request quoting server_args={'x': 1}", CAPACITY]) + "\n"
    run = subprocess.run(["grep", "-E", STARTUP_LINES_ERE], input=text, capture_output=True, text=True, check=False)
    assert run.stdout.splitlines() == [DICT_ARGS.split("] ", 1)[1], CAPACITY]


def test_a_start_that_died_before_its_pool_gives_way_to_the_last_one_that_had_one() -> None:
    """sglang 0.5.23 mem_cache/kv_cache_configurator.py ``_profile_available_bytes`` raises before the KV line
    when the weights leave nothing: its memory lines are there, its pool is not; the same model's previous
    start (the same weights) still measures the KV cell. Another model's start does not stand in."""
    good = [
        "[2026-12-01 09:06:33] server_args=ServerArgs(model_path='m', tp_size=8, mem_fraction_static=0.94)",
        "[2026-12-01 09:06:33 TP0] Load weight begin. avail mem=91.60 GB",
        "[2026-12-01 09:06:33 TP0] Load weight end. type=X, avail mem=19.17 GB, mem usage=72.43 GB.",
        "[2026-12-01 09:06:33 TP0] KV Cache is allocated. #tokens: 209007, KV size: 13.68 GB",
    ]
    failed = [
        "[2026-12-01 10:00:01] server_args=ServerArgs(model_path='m', tp_size=8, mem_fraction_static=0.75)",
        "[2026-12-01 10:00:01 TP0] Load weight begin. avail mem=91.60 GB",
        "[2026-12-01 10:00:40 TP0] Load weight end. type=X, avail mem=19.17 GB, mem usage=72.43 GB.",
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.75. Raise "
        "--mem-fraction-static above 0.791 (minimum viable = 1 - available/pre = 0.7907). If using speculative "
        "decoding, draft weights are now counted.",
    ]
    numbers = parse_startup([*good, *failed])
    assert numbers.kv_tokens == 209007 and numbers.server_args["mem_fraction_static"] == 0.94
    other = [line.replace("model_path='m'", "model_path='n'") for line in failed]
    assert parse_startup([*good, *other]).kv_tokens is None
