"""The engine seam: the registry, each engine's words, vLLM's verdict on its latest failure."""

from __future__ import annotations

from decimal import Decimal

import pytest

from remediate.core.engines import ENGINES, SGLANG, VLLM, engine_named
from remediate.core.engines.vllm.engine import abbreviates_vllm_knob, resolve_vllm_flag, vllm_capacity, vllm_verdict
from remediate.core.unitfile.edit import UnitSettings
from remediate.core.unitfile.report import flag_values
from remediate.core.unitfile.sources import SourceFile, UnitSources, load_service

P = "(EngineCore_DP0 pid=41) "
START = [
    f"{P}INFO 12-04 03:20:01 [gpu_worker.py:298] Available KV cache memory: 46.38 GiB",
    f"{P}INFO 12-04 03:20:01 [kv_cache_utils.py:1087] GPU KV cache size: 60,720 tokens",
    f"{P}INFO 12-04 03:20:01 [kv_cache_utils.py:1091] Maximum concurrency for 40,960 tokens per request: 1.48x",
]
MAX_LEN = (
    f"{P}ValueError: To serve at least one request with the models's max seq len (40960), (31.25 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (8.39 GiB). Based on the available memory, the "
    "estimated maximum model length is 10992. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
    "when initializing the engine."
)
WRAPPER = (
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}"
)


def test_the_registry_names_both_engines() -> None:
    assert set(ENGINES) == {"sglang", "vllm"}
    assert engine_named(None) is SGLANG and engine_named("vllm") is VLLM
    assert (SGLANG.fraction_option, SGLANG.prefill_option, SGLANG.default_port) == (
        "--mem-fraction-static", "--chunked-prefill-size", 30000,
    )  # fmt: skip
    assert (VLLM.fraction_option, VLLM.prefill_option, VLLM.default_port) == (
        "--gpu-memory-utilization", "--max-num-batched-tokens", 8000,
    )  # fmt: skip
    assert VLLM.fraction_default == Decimal("0.9") and SGLANG.fraction_default is None
    assert not VLLM.prefill_can_disable and VLLM.info_paths == ()


def test_flag_values_are_keyed_by_the_engines_names() -> None:
    assert flag_values(UnitSettings("0.94", "4096", None)) == {
        "mem_fraction_static": "0.94",
        "chunked_prefill_size": "4096",
    }
    assert flag_values(UnitSettings("0.94", "4096", None, "vllm")) == {
        "gpu_memory_utilization": "0.94", "max_num_batched_tokens": "4096",
    }  # fmt: skip


def test_the_service_knows_its_engine() -> None:
    text = "[Service]\nExecStart=/usr/bin/docker run --rm vllm/vllm-openai vllm serve /m --port 8001\n"
    assert load_service(UnitSources(SourceFile("/etc/systemd/system/v.service", text))).engine is VLLM
    text = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m\n"
    assert load_service(UnitSources(SourceFile("/etc/systemd/system/s.service", text))).engine is SGLANG


@pytest.mark.parametrize(
    ("word", "flag"),
    [("gpu_memory_utilization", "gpu-memory-utilization"), ("max-num-batched-tokens", "max-num-batched-tokens"),
     ("no-enable-chunked-prefill", "no-enable-chunked-prefill"), ("frobnicate", None), ("gpu-mem", None)],
)  # fmt: skip
def test_vllm_flags_resolve_as_flexible_argument_parser(word: str, flag: str | None) -> None:
    assert resolve_vllm_flag(word) == flag


def test_abbreviations_of_a_knob_are_told() -> None:
    assert abbreviates_vllm_knob("gpu-mem") and abbreviates_vllm_knob("max_num_b")
    assert not abbreviates_vllm_knob("gpu-memory-utilization") and not abbreviates_vllm_knob("port")


def test_capacity_is_the_last_starts_kv_cache_size() -> None:
    assert vllm_capacity(START) == 60720
    assert vllm_capacity([*START, START[0].replace("46.38", "45.59"), START[1].replace("60,720", "59,680")]) == 59680
    assert vllm_capacity(["INFO 12-04 03:20:01 [x.py:1] hello"]) is None


def test_the_max_model_len_failure_blocks_and_reads_past_the_wrapper() -> None:
    verdict = vllm_verdict([f"{P}ERROR 12-04 03:21:00 [core.py:708] EngineCore failed to start.", MAX_LEN, "", WRAPPER])
    assert verdict is not None
    assert verdict.kind == "max-model-len" and verdict.blocking and not verdict.is_stale
    assert verdict.direction == "raise --gpu-memory-utilization or lower --max-model-len"
    assert verdict.numbers["estimated_max_len"] == 10992
    assert verdict.evidence[-1].startswith("RuntimeError: Engine core initialization failed.")


def test_a_startup_failure_followed_by_a_good_start_is_stale() -> None:
    verdict = vllm_verdict([MAX_LEN, WRAPPER, *START])
    assert verdict is not None and verdict.blocking and verdict.is_stale


def test_the_wrapper_alone_says_read_further_back() -> None:
    verdict = vllm_verdict([WRAPPER])
    assert verdict is not None and verdict.kind == "init-failed" and not verdict.blocking
    assert "--lines" in verdict.direction


def test_the_runtime_oom_is_the_recipe_and_does_not_block() -> None:
    lines = [
        *START,
        f"{P}ERROR 12-04 03:30:00 [core.py:790] EngineCore encountered a fatal error.",
        f"{P}Traceback (most recent call last):",
        f"{P}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.21 GiB is free.",
    ]
    verdict = vllm_verdict(lines)
    assert verdict is not None and verdict.kind == "runtime-oom" and not verdict.blocking
    assert verdict.numbers == {"tried_gib": 3.0}


def test_another_process_is_reported_first() -> None:
    other = (
        "ValueError: Free memory on device (60.12/79.19 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    verdict = vllm_verdict([other, MAX_LEN, WRAPPER])
    assert verdict is not None and verdict.kind == "other-process" and verdict.blocking


def test_sampler_oom_says_fewer_sequences_without_blocking() -> None:
    sampler = (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
        "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
    )
    verdict = vllm_verdict([sampler, WRAPPER])
    assert verdict is not None and verdict.kind == "sampler-oom" and not verdict.blocking
    assert verdict.direction == "lower --max-num-seqs" and verdict.numbers == {"num_seqs": 1024}


def test_a_healthy_journal_has_no_verdict() -> None:
    assert vllm_verdict(START) is None


def test_the_startup_grep_keeps_vllms_capacity_lines_and_drops_the_rest() -> None:
    import subprocess

    noise = [f"{P}INFO 12-04 03:30:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s"] * 3
    text = "\n".join([*START, *noise]) + "\n"
    kept = subprocess.run(["grep", "-E", VLLM.startup_lines_ere], input=text, capture_output=True, text=True)
    assert kept.stdout.splitlines() == START
    assert vllm_capacity(kept.stdout.splitlines()) == 60720
