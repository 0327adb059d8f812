"""Speculative decoding: the draft worker's startup lines, the pool model with the draft's share, and the
uncounted-draft failure pair (runtime OOM at X, ``Not enough memory`` at a lower Y)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from remediate.core.capacity.pool import GIB, BudgetModel, DraftShare, Measured, calibrate, model_from_server
from remediate.core.diagnosis import advise, parse_journal
from remediate.core.startup import parse_startup

ARGS = (
    "[2026-12-01 09:00:00] server_args=ServerArgs(model_path='/m/k26', mem_fraction_static=0.85, page_size=1, "
    "speculative_algorithm='EAGLE', speculative_num_steps=3, speculative_eagle_topk=1, "
    "speculative_num_draft_tokens=4, tp_size={tp})"
)


def _counted(rank: str) -> list[str]:
    """0.5.23's order: both models' weights, then the target's pool, then the draft's (the same tokens)."""
    p = f"[2026-12-01 09:00:01 {rank}] "
    return [
        p + "Load weight begin. avail mem=78.00 GB",
        p + "Load weight end. elapsed=9.10 s, type=Kimi, avail mem=38.00 GB, mem usage=40.00 GB.",
        p + "Load weight begin. avail mem=38.00 GB",
        p + "Load weight end. elapsed=1.20 s, type=Eagle, avail mem=36.00 GB, mem usage=2.00 GB.",
        p + "KV Cache is allocated. #tokens: 100000, K size: 8.00 GB, V size: 8.00 GB",
        p + "KV Cache is allocated. #tokens: 100000, K size: 0.50 GB, V size: 0.50 GB",
    ]


def _uncounted(rank: str) -> list[str]:
    """0.4.6.post5's order: the target sizes its pool alone; the draft loads afterwards."""
    p = f"[2026-12-01 09:00:01 {rank}] "
    return [
        p + "Load weight begin. avail mem=78.00 GB",
        p + "Load weight end. type=Kimi, avail mem=38.00 GB, mem usage=40.00 GB.",
        p + "KV Cache is allocated. #tokens: 100000, K size: 8.00 GB, V size: 8.00 GB",
        p + "Load weight begin. avail mem=21.90 GB",
        p + "Load weight end. type=Eagle, avail mem=19.90 GB, mem usage=2.00 GB.",
        p + "KV Cache is allocated. #tokens: 100000, K size: 0.50 GB, V size: 0.50 GB",
    ]


def test_counted_draft_lines_are_read_apart_from_the_targets_on_every_rank() -> None:
    lines = [ARGS.format(tp=2), *_counted("TP0"), *_counted("TP1")]
    n = parse_startup(lines)
    assert (n.free0_gib, n.free1_gib, n.kv_tokens, n.kv_gib) == (78.0, 38.0, 100000, 16.0)
    assert (n.draft_free1_gib, n.draft_weights_gib, n.draft_kv_tokens, n.draft_kv_gib) == (36.0, 2.0, 100000, 1.0)
    assert n.is_draft_counted and n.ranks == ("TP0", "TP1")
    assert n.server_args["speculative_num_draft_tokens"] == 4


def test_uncounted_draft_is_told_by_its_lines_coming_after_the_targets_pool() -> None:
    n = parse_startup([ARGS.format(tp=1), *_uncounted("TP0")])
    assert n.free1_gib == 38.0 and n.draft_weights_gib == 2.0 and not n.is_draft_counted


def test_without_a_speculative_algorithm_a_second_load_begins_a_new_start() -> None:
    plain = ARGS.format(tp=1).replace("speculative_algorithm='EAGLE', ", "")
    n = parse_startup([plain, *_counted("TP0")])
    assert n.draft_weights_gib is None and n.free0_gib == 38.0  # the later block wins, as before


def test_counted_model_divides_the_rest_by_both_cells_and_reproduces_the_anchor() -> None:
    model = model_from_server(parse_startup([ARGS.format(tp=1), *_counted("TP0")]))
    assert isinstance(model, BudgetModel) and model.draft is not None and model.draft.is_counted
    assert model.sizing_cell_bytes == model.cell_bytes + model.draft.cell_bytes
    assert model.predict(0.85).tokens == 100000
    assert any("draft weights 2.00 GiB" in note for note in model.notes)
    # a lower fraction loses (free0 * df) / (cell + draft cell) tokens, not / cell alone
    drop = model.predict(0.85).tokens - model.predict(0.80).tokens
    assert math.isclose(drop, 78.0 * 0.05 * GIB / model.sizing_cell_bytes, abs_tol=2)


def test_uncounted_model_takes_the_draft_out_of_the_headroom() -> None:
    model = model_from_server(parse_startup([ARGS.format(tp=1), *_uncounted("TP0")]))
    assert isinstance(model, BudgetModel) and model.draft is not None and not model.draft.is_counted
    assert model.predict(0.85).tokens == 100000
    plain = int(78.0 * 0.15 * GIB)
    assert plain - model.headroom_bytes(0.85) == model.draft_bytes(100000)


@given(
    fraction=st.floats(0.6, 0.95),
    other=st.floats(0.6, 0.95),
    draft_cell=st.floats(1_000, 100_000),
    is_counted=st.booleans(),
)
def test_anchor_and_calibration_reproduce_measured_pools_with_a_draft(
    fraction: float, other: float, draft_cell: float, is_counted: bool
) -> None:
    truth = BudgetModel(78.0, 38.0, 160_000.0, draft=DraftShare(2.0, draft_cell, is_counted, 0 if is_counted else 500))
    start = BudgetModel(78.0, 37.0, 150_000.0, draft=truth.draft)
    measured = [Measured(f, truth.predict(f).tokens) for f in (fraction, other)]
    if any(m.tokens <= 0 for m in measured):
        return
    fitted, _ = calibrate(start, measured)
    for m in measured:
        assert abs(fitted.predict(m.fraction).tokens - m.tokens) <= max(2, m.tokens * 1e-4)


OOM = (
    "[2026-12-01 09:10:00 TP0] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has "
    "a total capacity of 79.19 GiB of which 100.00 MiB is free."
)
EMPTY = "[2026-12-01 09:20:00 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def _pair(algorithm: str | None) -> list[str]:
    args = "[2026-12-01 09:00:00] server_args=ServerArgs(model_path='/m/k26', mem_fraction_static={f}{spec})"
    spec = f", speculative_algorithm='{algorithm}'" if algorithm else ""
    return [args.format(f="0.85", spec=spec), OOM, args.format(f="0.84", spec=spec), EMPTY]


def test_the_uncounted_draft_pair_is_named_with_the_versions_that_count_it() -> None:
    rec = advise(parse_journal(_pair("EAGLE")))
    assert rec.kind == "kv_pool_too_small_at_startup" and rec.blocking
    (note,) = [r for r in rec.reasons if r.startswith("uncounted draft")]
    assert "0.85" in note and "0.84" in note and "0.5.23" in note and "--speculative-num-draft-tokens" in note


def test_the_same_pair_without_a_draft_is_not_called_an_uncounted_draft() -> None:
    rec = advise(parse_journal(_pair(None)))
    assert not any(r.startswith("uncounted draft") for r in rec.reasons)


def test_a_startup_failure_above_the_oom_fraction_is_not_the_pair() -> None:
    lines = _pair("EAGLE")
    lines[2] = lines[2].replace("0.84", "0.86")
    assert not any(r.startswith("uncounted draft") for r in advise(parse_journal(lines)).reasons)


def test_the_0523_dict_repr_names_the_draft_and_its_lines_are_read() -> None:
    args = (
        "[2026-12-01 09:00:00] server_args={'model_path': '/m/k26', 'mem_fraction_static': 0.85, "
        "'speculative_algorithm': 'DFLASH', 'speculative_num_steps': 3, 'speculative_eagle_topk': 1, "
        "'speculative_num_draft_tokens': 4, 'tp_size': 1}"
    )
    n = parse_startup([args, *_counted("TP0")])
    assert n.server_args["speculative_algorithm"] == "DFLASH" and n.is_draft_counted
    assert n.draft_weights_gib == 2.0 and n.kv_tokens == n.draft_kv_tokens == 100000
