"""vLLM's pool as the budget model: prediction at another utilization, calibration, the max_model_len floor."""

from __future__ import annotations

import math

import pytest

from remediate.core.capacity.headroom import Knobs, Spike, choose
from remediate.core.capacity.pool import GIB, BudgetModel, Measured, Unmodelled, calibrate
from remediate.core.engines.vllm.capacity import (
    VllmNumbers,
    below_floor,
    floor_utilization,
    hold_floor,
    longest_fitting,
    parse_cache_config,
    vllm_model,
)
from remediate.core.engines.vllm.startup import VllmStartup

# The vLLM stand-in's sizing (sandbox/standin/vllm/memory.py): an H100 as torch sees it (79.19 GiB), weights
# 24.30 GiB, non-torch 0.60 GiB, a profile peak of batched/4096 GiB, 800 KiB of KV a token, blocks of 16.
TOTAL, WEIGHTS, NON_TORCH, KV_BYTES = 79.19, 24.30, 0.60, 800 * 1024


def standin(utilization: float, batched: int = 16384, block: int = 16) -> tuple[float, int]:
    """(available GiB, tokens) exactly as the stand-in computes them."""
    available = TOTAL * utilization - (WEIGHTS + batched / 4096 + NON_TORCH)
    blocks = max(0, int(available * GIB) // (block * KV_BYTES))
    return available, blocks * block


def logged(utilization: float, batched: int = 16384) -> VllmNumbers:
    available, tokens = standin(utilization, batched)
    startup = VllmStartup(available_kv_gib=round(available, 2), kv_tokens=tokens, max_model_len=40960)
    return VllmNumbers(startup, utilization, TOTAL, "torch's OOM text", 16, 40960)


def model_at(utilization: float) -> BudgetModel:
    built = vllm_model(logged(utilization))
    assert isinstance(built, BudgetModel)
    return built


@pytest.mark.parametrize("other", [0.80, 0.85, 0.90, 0.94, 0.97])
def test_the_pool_at_another_utilization_is_within_half_a_percent(other: float) -> None:
    model = model_at(0.95)
    assert model.predict(0.95).tokens == standin(0.95)[1] == 60720
    predicted, reported = model.predict(other).tokens, standin(other)[1]
    assert abs(predicted - reported) / reported < 0.005, (other, predicted, reported)
    assert predicted % 16 == 0


def test_one_observation_anchors_and_two_fit_the_slope_without_the_total() -> None:
    model = model_at(0.95)
    wrong = BudgetModel(model.free0_gib * 1.3, model.free1_gib, model.cell_bytes, 16)  # a wrong total
    fitted, errors = calibrate(wrong, [Measured(0.90, standin(0.90)[1]), Measured(0.95, standin(0.95)[1])])
    assert len(errors) == 2
    for other in (0.85, 0.92):
        assert abs(fitted.predict(other).tokens - standin(other)[1]) <= 16 * 2


def test_unmodelled_without_the_numbers() -> None:
    assert isinstance(vllm_model(VllmNumbers(VllmStartup(), 0.9, TOTAL)), Unmodelled)
    assert isinstance(vllm_model(VllmNumbers(logged(0.9).startup, None, TOTAL)), Unmodelled)
    unknown = vllm_model(VllmNumbers(logged(0.9).startup, 0.9, None))
    assert isinstance(unknown, Unmodelled) and "total memory" in unknown.reason
    v0 = VllmStartup(available_kv_gib=10.0, kv_tokens=12800, total_gib=40.0)
    assert isinstance(vllm_model(VllmNumbers(v0, 0.9, None)), BudgetModel)


def lowest_starting(max_model_len: int, batched: int = 16384) -> float:
    """The stand-in's own answer: the lowest hundredth at which it starts with this max_model_len."""
    needed = math.ceil(max_model_len / 16) * 16 * KV_BYTES / GIB
    for hundredths in range(1, 101):
        if standin(hundredths / 100, batched)[0] >= needed:
            return hundredths / 100
    raise AssertionError("never starts")


@pytest.mark.parametrize("max_model_len", [40960, 50000, 57344, 60000])
def test_the_floor_is_the_lowest_utilization_that_still_starts(max_model_len: int) -> None:
    floor = floor_utilization(model_at(0.95), max_model_len)
    assert floor is not None
    assert floor in (lowest_starting(max_model_len), lowest_starting(max_model_len) + 0.01)


def test_no_floor_when_even_the_whole_gpu_is_not_enough() -> None:
    assert floor_utilization(model_at(0.95), 200_000) is None
    assert floor_utilization(model_at(0.95), None) is None
    assert longest_fitting(model_at(0.95), 0.30) == 0


def crash_plan(model: BudgetModel, max_model_len: int) -> tuple[float | None, object]:
    spike = Spike(tried_bytes=int(2.93 * GIB), prefill_tokens=None, free_bytes=0, reserved_unallocated_bytes=0,
                  fraction=0.95)  # fmt: skip
    plan = choose(model, spike, centre=0.95, current=Knobs(16384, False), proposed=Knobs(4096, True))
    floor = floor_utilization(model, max_model_len)
    return floor, hold_floor(plan, model, floor, max_model_len)


def test_a_choice_below_the_floor_is_held_at_it_and_says_so() -> None:
    model = model_at(0.95)
    unheld = choose(model, Spike(int(2.93 * GIB), None, 0, 0, 0.95), centre=0.95, current=Knobs(16384, False),
                    proposed=Knobs(4096, True))  # fmt: skip
    assert unheld.chosen is not None and unheld.chosen.fraction == 0.90
    floor, plan = crash_plan(model, 57344)
    assert floor == 0.92
    assert plan.chosen is not None and plan.chosen.fraction == 0.92  # type: ignore[attr-defined]
    (warning,) = [w for w in plan.warnings if "max_model_len" in w]  # type: ignore[attr-defined]
    assert "--max-model-len" in warning and "kept 0.92" in warning and "0.9," in warning
    below = [r for r in plan.rows if r.fraction < 0.92]  # type: ignore[attr-defined]
    assert below and not any(r.prediction.is_viable or r.is_chosen for r in below)
    assert sum(r.is_chosen for r in plan.rows) == 1  # type: ignore[attr-defined]


def test_a_choice_above_the_floor_is_left_alone() -> None:
    floor, plan = crash_plan(model_at(0.95), 40960)
    assert floor == 0.76
    assert plan.chosen is not None and plan.chosen.fraction == 0.90  # type: ignore[attr-defined]
    assert not [w for w in plan.warnings if "max_model_len" in w]  # type: ignore[attr-defined]


METRICS = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",gpu_memory_utilization="0.95",\
num_gpu_blocks="3795",prefix_caching_hash_algo="builtin"} 1.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_cache_config_from_metrics() -> None:
    config = parse_cache_config(METRICS)
    assert (config.num_gpu_blocks, config.block_size, config.gpu_memory_utilization) == (3795, 16, 0.95)
    assert config.tokens == 60720
    assert parse_cache_config("vllm:num_requests_running 0\n").tokens is None
    odd = parse_cache_config('vllm:cache_config_info{gpu_memory_utilization="nan",num_gpu_blocks="x"} 1\n')
    assert (odd.gpu_memory_utilization, odd.num_gpu_blocks) == (None, None)


def test_a_recipe_below_the_floor_is_said_with_the_alternative() -> None:
    model = model_at(0.95)
    assert below_floor(model, 0.92, 57344) is None and below_floor(model, 0.5, None) is None
    said = below_floor(model, 0.91, 57344)
    assert said is not None and "below 0.92" in said and "refuse to start" in said
    assert "--max-model-len (at most 56,560 at 0.91)" in said
