"""vLLM's startup "No available memory for the cache blocks" gets a number from the start's own lines and the
card's total; ``--kv-cache-memory-bytes`` is refused by the lowering recipe; the default utilization per version.

Every text is vLLM's own: vllm/v1/worker/gpu_model_runner.py ``GPUModelRunner.load_model`` ("Model loading took
%.4f GiB and %.6f seconds", 0.8.5 and 0.11; 0.34's v1/worker/gpu/model_runner.py "Model loading took %s GiB memory
and %.6f seconds"), vllm/v1/worker/gpu_worker.py ``Worker.determine_available_memory`` ("Available KV cache
memory: %.2f GiB", logged before the check, so ≤ 0 on a failing start), vllm/v1/core/kv_cache_utils.py
``check_enough_kv_cache_memory`` (0.11; 0.34: v1/core/kv_cache_planning.py ``_check_enough_kv_cache_memory``).
"""

from __future__ import annotations

from remediate.core.engines.vllm.advice import vllm_recommendation
from remediate.core.engines.vllm.defaults import default_utilization_at
from remediate.core.engines.vllm.engine import vllm_verdict
from tests.support.journals import FAILED_AT_050, H100_SMI_TOTAL, NO_MEMORY_011, NO_MEMORY_034, P


def test_the_050_host_gets_a_number_above_050_from_its_own_start_and_the_cards_total() -> None:
    verdict = vllm_verdict(FAILED_AT_050)
    assert verdict is not None and verdict.kind == "no-cache-memory" and verdict.blocking
    assert verdict.numbers == {"weights_gib": 32.8821, "available_kv_gib": -2.31}
    rec = vllm_recommendation(verdict, "0.50", 0, H100_SMI_TOTAL)
    # 0.50 + (2.31 + 0.005) / 79.65 = 0.5291 → 0.53, the first hundredth above
    assert rec.other_flags == {"--gpu-memory-utilization": "0.53"}
    assert any("left -2.31 GiB for the KV cache at 0.50 of 79.65 GiB" in r for r in rec.reasons), rec.reasons
    assert rec.blocking  # still refused by oom: the lowering recipe makes it worse


def test_without_the_cards_total_it_says_what_is_missing() -> None:
    verdict = vllm_verdict(FAILED_AT_050)
    assert verdict is not None
    rec = vllm_recommendation(verdict, "0.50", 0, None)
    assert rec.other_flags == {}
    assert "no number: the card's total memory is unknown (nvidia-smi was not read)" in rec.reasons


def test_vllm_0_8_5_logs_only_the_weights_a_floor_not_a_number() -> None:
    lines = [
        "INFO 12-04 03:19:20 [gpu_model_runner.py:1347] Model loading took 32.8821 GiB and 41.127310 seconds",
        NO_MEMORY_011,
    ]
    verdict = vllm_verdict(lines)
    assert verdict is not None and verdict.numbers == {"weights_gib": 32.8821}
    rec = vllm_recommendation(verdict, "0.50", 0, H100_SMI_TOTAL)
    assert rec.other_flags == {}
    assert any("no 'Available KV cache memory'" in r and "above 0.41 of 79.65 GiB" in r for r in rec.reasons)


def test_vllm_0_34s_formats_and_an_earlier_good_starts_line_is_not_this_starts() -> None:
    good = f"{P}INFO 12-04 02:00:00 [gpu_worker.py:796] Available KV cache memory: 40.1 GiB"
    lines = [
        good,
        f"{P}INFO 12-04 03:19:20 [model_runner.py:442] Model loading took 32.88 GiB memory and 41.127310 seconds",
        f"{P}{NO_MEMORY_034}",
    ]
    verdict = vllm_verdict(lines)
    assert verdict is not None and verdict.numbers == {"weights_gib": 32.88}
    failing = [*lines[:2], f"{P}INFO 12-04 03:19:58 [gpu_worker.py:796] Available KV cache memory: -0.5 GiB", lines[2]]
    verdict = vllm_verdict(failing)
    assert verdict is not None and verdict.numbers["available_kv_gib"] == -0.5
    rec = vllm_recommendation(verdict, None, 0, H100_SMI_TOTAL)  # the unit sets none: vLLM's default 0.9
    assert rec.other_flags == {"--gpu-memory-utilization": "0.91"}


def test_the_default_utilization_is_the_versions_own_where_the_server_says_its_mode() -> None:
    """0.8.5 and 0.11 CacheConfig: 0.9; 0.34 vllm/config/cache.py ``resolved_gpu_memory_utilization``: 1.0 with the
    extensible KV cache, ``DEFAULT_GPU_MEMORY_UTILIZATION`` 0.92 without. 0.34's ``CacheConfig.metrics_info`` puts
    every field on vllm:cache_config_info, the unset utilization as "None"."""
    from remediate.core.engines.vllm.capacity import default_utilization, parse_cache_config

    old = parse_cache_config('vllm:cache_config_info{block_size="16",gpu_memory_utilization="0.9"} 1.0')
    assert old.is_extensible is None and default_utilization(old) == 0.9
    new = 'vllm:cache_config_info{block_size="16",enable_extensible_kv_cache="%s",gpu_memory_utilization="None"} 1.0'
    on = parse_cache_config(new % "True")
    assert on.gpu_memory_utilization is None and on.is_extensible is True and default_utilization(on) == 1.0
    assert default_utilization(parse_cache_config(new % "False")) == 0.92


def test_vllm_0_34s_hint_names_the_resolved_utilization_or_that_none_higher_exists() -> None:
    """0.34 v1/core/kv_cache_planning.py ``_more_kv_cache_memory_hint`` with the extensible KV cache."""
    within = (
        "ValueError: No available memory for the cache blocks. The KV cache gets what is left after the model and "
        "its activations within `gpu_memory_utilization`=0.8; increase it (with the extensible KV cache it "
        "defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    lines = [*FAILED_AT_050[:2], f"{P}{within}"]
    verdict = vllm_verdict(lines)
    assert verdict is not None
    rec = vllm_recommendation(verdict, None, 0, H100_SMI_TOTAL)  # the unit sets none: the line's 0.8 wins
    assert rec.other_flags == {"--gpu-memory-utilization": "0.83"}
    full = (
        "ValueError: No available memory for the cache blocks. The extensible KV cache already takes all device "
        "memory left after the model and its activations; decrease `max_model_len` or `max_num_seqs`, or the "
        "model needs a device with more memory. See https://docs.vllm.ai/en/latest/configuration/"
        "conserving_memory/ for more details."
    )
    verdict = vllm_verdict([*FAILED_AT_050[:2], f"{P}{full}"])
    assert verdict is not None
    rec = vllm_recommendation(verdict, None, 0, H100_SMI_TOTAL)
    assert rec.other_flags == {} and "the extensible KV cache already takes all the memory" in rec.reasons[-1]


def test_default_utilization_by_release() -> None:
    # CacheConfig.gpu_memory_utilization: 0.9 up to 0.19.1, Field(default=0.92) from 0.20.0; 0.34.0: None, resolved
    # to 1.0 (extensible KV cache) or 0.92: the lower is taken
    assert default_utilization_at((0, 8, 5)) == 0.9
    assert default_utilization_at((0, 11, 0)) == 0.9
    assert default_utilization_at((0, 19, 1)) == 0.9
    assert default_utilization_at((0, 20, 0)) == 0.92
    assert default_utilization_at((0, 34, 0)) == 0.92
    assert default_utilization_at(None) is None
    assert default_utilization_at(()) is None
