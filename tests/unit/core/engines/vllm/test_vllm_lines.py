"""vLLM's startup and failure lines, read by core.engines.vllm.

The texts marked "vLLM source" are rebuilt verbatim from vLLM's format strings (0.11.0 and 0.8.5 wheels;
file and function in docs/VLLM.md) with example numbers filled in.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.engines.vllm import failures as f
from remediate.core.engines.vllm.failures import diagnose_vllm
from remediate.core.engines.vllm.logline import vllm_message
from remediate.core.engines.vllm.startup import VllmStartup, parse_vllm_startup

J = "Dec 04 03:20:01 gpu1 vllm[4242]: "
E = "(EngineCore_DP0 pid=4300) "

# vLLM source, 0.11 V1 start (gpu_worker.py, kv_cache_utils.py, core.py), as journalctl shows it.
V1_START = [
    J + E + "INFO 12-04 03:20:01 [gpu_worker.py:298] Available KV cache memory: 52.31 GiB",
    J + E + "INFO 12-04 03:20:01 [kv_cache_utils.py:1087] GPU KV cache size: 428,512 tokens",
    J + E + "INFO 12-04 03:20:01 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens per request: 13.08x",
    J + E + "INFO 12-04 03:20:09 [core.py:210] init engine (profile, create kv cache, warmup model) took 41.27 seconds",
]


def test_logline_takes_every_prefix_off() -> None:
    assert vllm_message(V1_START[0]) == ("Available KV cache memory: 52.31 GiB", "INFO")
    coloured = "\x1b[36m(EngineCore_DP0 pid=1)\x1b[0m WARNING 01-02 03:04:05 [v1/x.py:9] hi"
    assert vllm_message(coloured) == ("hi", "WARNING")
    assert vllm_message("plain text") == ("plain text", "")


def test_v1_start() -> None:
    got = parse_vllm_startup(V1_START)
    assert got == VllmStartup(52.31, 428512, 32768, 13.08, 41.27)
    assert got.is_complete and not got.is_v0


def test_a_later_start_replaces_the_earlier_numbers() -> None:
    again = V1_START[:1] + ["INFO 12-04 04:00:00 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB"]
    assert parse_vllm_startup(again) == VllmStartup(available_kv_gib=10.0)
    assert not parse_vllm_startup(again).is_complete


def test_v0_start_0_8_5() -> None:
    # vLLM source, 0.8.5: worker.py determine_num_available_blocks (one message, three lines) and
    # executor_base.py initialize_cache, whose 0.8.5 concurrency line has no thousands separator.
    lines = [
        "INFO 12-04 03:20:01 [worker.py:287] Memory profiling takes 4.51 seconds\n"
        "the current vLLM instance can use total_gpu_memory (79.11GiB) x gpu_memory_utilization (0.90) = 71.20GiB\n"
        "model weights take 14.99GiB; non_torch_memory takes 0.15GiB; PyTorch activation peak memory takes "
        "1.38GiB; the rest of the memory reserved for KV Cache is 54.68GiB.",
        "INFO 12-04 03:20:02 [executor_base.py:112] # cuda blocks: 27996, # CPU blocks: 2048",
        "INFO 12-04 03:20:02 [executor_base.py:117] Maximum concurrency for 8192 tokens per request: 54.68x",
    ]
    got = parse_vllm_startup(lines)
    assert got == VllmStartup(54.68, None, 8192, 54.68, None, 27996, 2048, 79.11, 0.9, True)
    assert got.is_complete
    assert (
        parse_vllm_startup(["INFO 01-01 00:00:00 [llm_engine.py:1] # GPU blocks: 5691, # CPU blocks: 2048"]).gpu_blocks
        == 5691
    )


def test_a_logged_request_is_not_a_startup_line() -> None:
    got = parse_vllm_startup(["INFO 12-04 03:20:01 [logger.py:1] Received request: 'GPU KV cache size: 1 tokens'"])
    assert got == VllmStartup()


# vLLM source, 0.11: kv_cache_utils.py check_enough_kv_cache_memory.
MAX_LEN = (
    "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (1.53 GiB). Based on the available memory, the "
    "estimated maximum model length is 12528. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)
NO_MEMORY = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine."
)
# vLLM source, 0.11: gpu_worker.py Worker.init_device.
FREE = (
    "ValueError: Free memory on device (40.12/79.19 GiB) on startup is less than desired GPU memory utilization "
    "(0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
)
# vLLM source, 0.11: gpu_model_runner.py _dummy_sampler_run.
SAMPLER = (
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
    "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
)
# vLLM source, 0.11: v1/engine/utils.py wait_for_engine_startup.
WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


def test_max_model_len_read_past_the_wrapper() -> None:
    got = diagnose_vllm([J + E + "ERROR 12-04 03:20:01 [core.py:708] EngineCore failed to start.", J + E + MAX_LEN,
                         J + WRAPPER])  # fmt: skip
    assert got.cause is not None and got.cause.kind == f.MAX_MODEL_LEN
    assert got.cause.numbers == {"max_model_len": 32768, "needed_gib": 4.0, "available_gib": 1.53,
                                 "estimated_max_len": 12528}  # fmt: skip
    assert "lower --max-model-len" in got.cause.direction
    assert [x.kind for x in got.failures] == [f.MAX_MODEL_LEN, f.INIT_FAILED]
    assert not got.only_wrapper


def test_max_model_len_without_an_estimate_and_v0() -> None:
    short = MAX_LEN.replace(" Based on the available memory, the estimated maximum model length is 12528.", "")
    assert diagnose_vllm([short]).failures[0].numbers == {"max_model_len": 32768, "needed_gib": 4.0,
                                                         "available_gib": 1.53}  # fmt: skip
    # vLLM source, 0.8.5: worker.py raise_if_cache_size_invalid.
    v0 = ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
          "stored in KV cache (20112). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
          "initializing the engine.")  # fmt: skip
    cause = diagnose_vllm([v0]).cause
    assert cause is not None and cause.numbers == {"max_model_len": 32768, "kv_tokens": 20112}


def test_each_startup_failure_has_its_direction() -> None:
    assert diagnose_vllm([NO_MEMORY]).failures[0].direction == "raise --gpu-memory-utilization"
    sampler = diagnose_vllm([SAMPLER]).cause
    assert sampler is not None and sampler.kind == f.SAMPLER_OOM and sampler.numbers == {"num_seqs": 1024}
    assert "--max-num-seqs" in sampler.direction


def test_another_process_is_reported_first() -> None:
    got = diagnose_vllm([FREE, NO_MEMORY, WRAPPER])
    assert got.cause is not None and got.cause.kind == f.OTHER_PROCESS
    assert got.cause.numbers == {"free_gib": 40.12, "total_gib": 79.19, "utilization": 0.9, "requested_gib": 71.27}


def test_only_the_wrapper_says_read_further_back() -> None:
    got = diagnose_vllm([WRAPPER])
    assert got.cause is None and got.only_wrapper
    assert f.DIRECTIONS[f.INIT_FAILED] == got.failures[0].direction
    assert not diagnose_vllm([]).only_wrapper


def test_runtime_prefill_oom_after_the_fatal_error() -> None:
    # vLLM source, 0.11: core.py run_engine_core's logger.exception, then torch's OOM text.
    lines = [
        J + E + "ERROR 12-04 03:30:00 [core.py:710] EngineCore encountered a fatal error.",
        J + E + "ERROR 12-04 03:30:00 [core.py:710] Traceback (most recent call last):",
        J + E + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total "
        "capacity of 79.19 GiB of which 1.02 GiB is free.",
    ]
    cause = diagnose_vllm(lines).cause
    assert cause is not None and cause.kind == f.RUNTIME_OOM and cause.numbers == {"tried_gib": 3.5}
    mib = diagnose_vllm([lines[0], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB."])
    assert mib.cause is not None and mib.cause.numbers == {"tried_gib": 0.5}


def test_torch_oom_without_the_fatal_line_or_too_far_is_not_runtime() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB."
    assert diagnose_vllm([oom]).cause is None
    far = ["EngineCore encountered a fatal error.", *["x"] * (f.FATAL_WINDOW + 1), oom]
    assert diagnose_vllm(far).cause is None


def test_a_logged_prompt_is_not_a_failure() -> None:
    assert diagnose_vllm(["INFO 01-01 00:00:00 [logger.py:1] Received request: prompt: 'No available memory "
                          "for the cache blocks. EngineCore encountered a fatal error.'"]).failures == ()  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=20))
def test_garbage_never_raises(lines: list[str]) -> None:
    parse_vllm_startup(lines)
    diagnose_vllm(lines)
    for line in lines:
        vllm_message(line)
