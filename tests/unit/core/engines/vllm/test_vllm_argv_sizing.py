"""The vLLM argv reader, engine_in_exec, and the sizing model (core.engines.vllm, core.unitfile.command)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.engines.vllm.argv import canonical, parse_vllm_args
from remediate.core.engines.vllm.sizing import VllmSizing
from remediate.core.unitfile.command import engine_in_exec, find_in_exec
from remediate.errors import ConfigError


def test_serve_positional_model_and_knobs() -> None:
    args = parse_vllm_args(
        ["meta-llama/Llama-3.1-8B", "--gpu_memory_utilization", "0.95", "--max-num-batched-tokens=16384",
         "--enable-chunked-prefill", "--no-enforce-eager", "-tp", "2", "--served-model-name", "a", "b",
         "--port", "8000"],
        serve=True,
    )  # fmt: skip
    assert args.model == "meta-llama/Llama-3.1-8B"
    assert args.value("gpu-memory-utilization") == "0.95"
    assert args.value("max-num-batched-tokens") == "16384"
    assert args.is_enabled("enable-chunked-prefill") is True
    assert args.is_enabled("enforce-eager") is False
    assert args.is_enabled("trust-remote-code") is None
    assert args.value("served-model-name") == "a b" and args.value("port") == "8000"
    assert args.owner("gpu-memory-utilization") == "the command line"
    assert args.owner("max-model-len") == "the default"
    assert not args.model_option_under_serve and args.abbreviated == ()


def test_last_occurrence_wins_and_unknown_flags() -> None:
    args = parse_vllm_args(["M", "--max-model-len", "4096", "--max-model-len", "8192", "--new-flag", "x",
                            "--other", "--lone"], serve=True)  # fmt: skip
    assert args.value("max-model-len") == "8192"
    assert args.value("new-flag") == "x" and args.is_set("other") and args.value("lone") is None
    assert args.value("nothing") is None


def test_api_server_model_option_and_serve_refusal() -> None:
    api = parse_vllm_args(["--model", "M", "--enable-chunked-prefill=False", "stray"], serve=False)
    assert api.model == "M" and not api.model_option_under_serve
    assert api.is_enabled("enable-chunked-prefill") is False
    assert parse_vllm_args(["--model", "M"], serve=True).model_option_under_serve


def test_abbreviations_of_knobs_are_reported() -> None:
    args = parse_vllm_args(["M", "--gpu-mem", "0.8", "--no-enable-chunked", "--max-num", "3", "--", "x"], serve=True)
    assert args.abbreviated == ("--gpu-mem", "--no-enable-chunked", "--max-num")


def test_config_file_owns_what_the_command_line_leaves() -> None:
    unread = parse_vllm_args(["M", "--config", "/etc/vllm/c.yaml"], serve=True)
    assert unread.config_file == "/etc/vllm/c.yaml" and not unread.config_read
    assert unread.owner("gpu-memory-utilization") == "--config /etc/vllm/c.yaml (not read)"
    read = parse_vllm_args(
        ["--config", "c.yaml", "--max-model-len", "8192"],
        serve=True,
        config={"model": "M2", "gpu_memory_utilization": 0.5, "max-model-len": 1, "enforce_eager": True,
                "enable-chunked-prefill": False},
    )  # fmt: skip
    assert read.model == "M2" and read.config_read
    assert read.value("gpu-memory-utilization") == "0.5" and read.owner("gpu-memory-utilization") == "--config c.yaml"
    assert read.value("max-model-len") == "8192" and read.owner("max-model-len") == "the command line"
    assert read.is_enabled("enforce-eager") is True and read.is_enabled("enable-chunked-prefill") is False
    assert read.owner("block-size") == "the default"
    assert parse_vllm_args(["M"], serve=True, config={"x": 1}).config_read is False
    assert parse_vllm_args(["-"], serve=False, config={"model": 3}).model is None
    assert parse_vllm_args(["M", "--config", "c.yaml"], serve=True, config={"model": "X"}).model == "M"
    assert parse_vllm_args(["--config", "c.yaml"], serve=False, config={"model": 3}).model is None


def test_canonical() -> None:
    assert canonical("--max_num_seqs") == "max-num-seqs"


@pytest.mark.parametrize(
    ("exec_start", "engine"),
    [
        ("/opt/venv/bin/vllm serve M --gpu-memory-utilization 0.9", "vllm"),
        ("/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model M", "vllm"),
        ("/usr/bin/docker run --rm --gpus all vllm/vllm-openai:v0.11.0 vllm serve M", "vllm"),
        ("/bin/bash -c 'exec numactl -N0 vllm serve M'", "vllm"),
        ("/usr/bin/uv run -m vllm.entrypoints.openai.api_server --model M", "vllm"),
        ("/usr/bin/python3 -m sglang.launch_server --model-path M", "sglang"),
        ("/usr/bin/sglang serve --model-path M", "sglang"),
        ("/usr/bin/python3 -m http.server", None),
        ("/usr/bin/uv run -m http.server", None),
        ("", None),
    ],
)
def test_engine_of(exec_start: str, engine: str | None) -> None:
    assert engine_in_exec(exec_start) == engine


def test_vllm_command_words_and_unreadable_wrappers() -> None:
    found = find_in_exec("/usr/bin/vllm serve M --max-model-len 8192", "vllm")
    assert found is not None and [t.text for t in found.args] == ["M", "--max-model-len", "8192"]
    assert find_in_exec("/usr/bin/vllm serve M", "sglang") is None
    with pytest.raises(ConfigError, match="runs vllm through `mywrap`"):
        engine_in_exec("/usr/bin/mywrap vllm serve M")
    with pytest.raises(ConfigError, match="runs vllm through `docker run --frob`"):
        engine_in_exec("/usr/bin/docker run --frob x img vllm serve M")
    with pytest.raises(ConfigError, match="runs sglang through `docker run --frob`"):
        engine_in_exec("/usr/bin/docker run --frob x img other")  # as find_in_exec has always said
    with pytest.raises(ConfigError, match="runs sglang through `mywrap`"):
        engine_in_exec("/usr/bin/mywrap python -m sglang.launch_server")


# A GPU of 80 GiB at 0.90 logged 50.00 GiB and 400,000 tokens: 1.25e-4 GiB a token.
S = VllmSizing(total_gib=80.0, utilization=0.9, available_gib=50.0, tokens=400_000)


def test_pool_at_another_utilization() -> None:
    assert S.available_at(0.95) == pytest.approx(54.0)
    assert S.tokens_at(0.95) == 432_000
    assert S.tokens_at(0.9) == 400_000
    assert S.tokens_at(0.94, freed_gib=1.0) == 433_600
    assert S.tokens_at(0.2) == 0


def test_lowest_utilization_for_max_model_len() -> None:
    assert S.lowest_utilization(32768) == 0.33
    assert S.tokens_at(0.33) >= 32768 > S.tokens_at(0.32)
    assert S.lowest_utilization(32768, freed_gib=8.0) == 0.23
    assert VllmSizing(80.0, 0.9, 75.0, 1_000_000).lowest_utilization(16) == 0.01
    assert VllmSizing(10.0, 0.9, 0.5, 1000).lowest_utilization(100_000) is None


def test_sizing_refuses_nonsense() -> None:
    broken = VllmSizing(80.0, 0.9, 50.0, 0)
    assert broken.gib_per_token == 0.0 and broken.tokens_at(0.9) == 0 and broken.lowest_utilization(10) is None
    assert S.lowest_utilization(0) is None
    assert VllmSizing(0.0, 0.9, 50.0, 10).lowest_utilization(10) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=12), st.booleans())
def test_garbage_argv_never_raises(words: list[str], serve: bool) -> None:
    parse_vllm_args(words, serve=serve, config={"a": None, "b": True})


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 200), st.floats(0, 1), st.floats(-10, 200), st.integers(-5, 10**7), st.floats(0, 1),
       st.integers(-5, 10**6))  # fmt: skip
def test_sizing_never_raises(total: float, util: float, avail: float, tokens: int, new: float, mml: int) -> None:
    sizing = VllmSizing(total, util, avail, tokens)
    assert sizing.tokens_at(new) >= 0
    lowest = sizing.lowest_utilization(mml)
    assert lowest is None or 0.01 <= lowest <= 1.0
