"""Journals and answers that several tests read: each line is the engine's own (the file and function cited)."""

from __future__ import annotations

from pathlib import Path

MIB = 1 << 20
BUDGET_LOGS = Path(__file__).resolve().parents[1] / "data" / "budget_logs"


def standin_journal(name: str) -> list[str]:
    """tests/data/budget_logs/``name``: the stand-in's stderr as ``journalctl -o cat`` prints it (no prefix)."""
    return [line.split("]: ", 1)[1] for line in (BUDGET_LOGS / name).read_text().splitlines() if "]: " in line]


# -- vLLM 0.11's start and its runtime OOM (vllm/v1/engine/core.py, vllm/v1/worker/gpu_worker.py
#    ``Worker.determine_available_memory``, vllm/v1/core/kv_cache_utils.py), nvidia-smi's answer for its card --
VLLM_START = [
    "(EngineCore_DP0 pid=7) INFO 12-04 03:20:01 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
    "model='standin/mha-13b-40k', max_seq_len=57344",
    "(EngineCore_DP0 pid=7) INFO 12-04 03:20:09 [gpu_worker.py:298] Available KV cache memory: 46.33 GiB",
    "(EngineCore_DP0 pid=7) INFO 12-04 03:20:09 [kv_cache_utils.py:1087] GPU KV cache size: 60,720 tokens",
]
VLLM_CRASH = [
    "(EngineCore_DP0 pid=7) ERROR 12-04 03:25:00 [core.py:710] EngineCore encountered a fatal error.",
    "(EngineCore_DP0 pid=7) Traceback (most recent call last):",
    "(EngineCore_DP0 pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.79 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 20.00 MiB is free. Including non-PyTorch memory, this process has 78.99 GiB "
    "memory in use.",
]
VLLM_SMI = ["81704, 616"]  # MiB: memory.total, memory.reserved (an H100 80GB: 79.19 GiB as torch sees it)


# -- a vLLM 0.11 start that failed for want of cache memory (whose lines they are:
#    tests/unit/core/engines/vllm/test_vllm_versions.py) ---------------------------------------------------
P = "Dec 04 03:20:01 gpu1 vllm[4242]: (EngineCore_DP0 pid=4300) "
H100_SMI_TOTAL = 81559 * 2**20  # nvidia-smi memory.total of an H100 80GB HBM3, in bytes
NO_MEMORY_011 = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine."
)
NO_MEMORY_034 = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its "
    "name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
FAILED_AT_050 = [
    f"{P}INFO 12-04 03:19:20 [gpu_model_runner.py:2653] Model loading took 32.8821 GiB and 41.127310 seconds",
    f"{P}INFO 12-04 03:19:58 [gpu_worker.py:298] Available KV cache memory: -2.31 GiB",
    f"{P}ERROR 12-04 03:19:58 [core.py:708] EngineCore failed to start.",
    f"{P}{NO_MEMORY_011}",
]
