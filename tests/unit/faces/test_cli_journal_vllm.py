"""`diagnose --journal` on a saved vLLM journal: vLLM's own reader, told by the --unit-file's engine or, without
one, by the journal itself; the runtime OOM gets the plain `remediate oom`, the startup failure blocks."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from remediate.cli.app import cli

PREFIX = "2026-12-04T06:45:30+0000 gpu-0 python3[4242]: "
RUNTIME = [
    "(EngineCore_DP0 pid=41) INFO 12-04 06:40:01 [kv_cache_utils.py:1087] GPU KV cache size: 60,720 tokens",
    "(EngineCore_DP0 pid=41) ERROR 12-04 06:45:30 [core.py:790] EngineCore encountered a fatal error.",
    "(EngineCore_DP0 pid=41) Traceback (most recent call last):",
    "(EngineCore_DP0 pid=41) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.79 GiB. GPU 0 has a "
    "total capacity of 79.19 GiB of which 407.53 MiB is free.",
]
STARTUP = [
    "(EngineCore_DP0 pid=41) ValueError: To serve at least one request with the models's max seq len (40960), "
    "(31.25 GiB KV cache is needed, which is larger than the available KV cache memory (10.69 GiB). Based on the "
    "available memory, the estimated maximum model length is 14016. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}",
]
UNIT = "[Service]\nExecStart=/usr/bin/vllm serve /m --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384\n"


def _diagnose(tmp_path: Path, lines: list[str], *extra: str) -> dict:  # type: ignore[type-arg]
    journal = tmp_path / "vllm.journal"
    journal.write_text("".join(PREFIX + line + "\n" for line in lines))
    result = CliRunner().invoke(cli, ["diagnose", "--journal", str(journal), *extra, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"][0]


def test_a_saved_runtime_oom_is_read_by_vllms_reader_with_the_unit_file(tmp_path: Path) -> None:
    unit = tmp_path / "vllm.service"
    unit.write_text(UNIT)
    host = _diagnose(tmp_path, RUNTIME, "--unit-file", str(unit))
    assert host["engine"] == "vllm" and host["findings"][0]["kind"] == "runtime-oom"
    rec = host["recommendation"]
    assert rec["other_flags"] == {"--gpu-memory-utilization": "0.94", "--max-num-batched-tokens": 4096}
    assert rec["command"].startswith("remediate oom ") and rec["blocking"] is False


def test_without_a_unit_file_the_journal_tells_the_engine(tmp_path: Path) -> None:
    host = _diagnose(tmp_path, STARTUP)
    assert host["engine"] == "vllm"
    assert host["findings"][0]["kind"] == "max-model-len" and host["recommendation"]["blocking"] is True
    assert host["recommendation"]["command"] is None


def test_the_logged_release_is_shown_and_its_default_utilization_stepped_down(tmp_path: Path) -> None:
    # 0.20.0 vllm/config/cache.py gpu_memory_utilization Field(default=0.92); the logo line of log_version_and_model
    logo = "INFO 12-04 06:40:00 [launcher.py:368]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.20.0"
    unit = tmp_path / "vllm.service"
    unit.write_text("[Service]\nExecStart=/usr/bin/vllm serve /m\n")
    host = _diagnose(tmp_path, [logo, *RUNTIME], "--unit-file", str(unit))
    assert host["engine_version"] == {"engine": "vllm", "version": "0.20.0", "source": "log"}
    assert host["recommendation"]["other_flags"]["--gpu-memory-utilization"] == "0.91"
    assert "engine_version" not in _diagnose(tmp_path, RUNTIME)  # no version line: none claimed
