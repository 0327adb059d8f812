"""`plan`'s human output shows a speculative server's draft share next to the model."""

from __future__ import annotations

from remediate.cli.render.plan import plan_lines

MODEL = {
    "free0_gib": 91.6,
    "free1_gib": 19.17,
    "cell_bytes": 70272.0,
    "page_size": 1,
    "min_viable_fraction": 0.7907,
    "anchor": None,
}


def test_the_draft_line_follows_the_model_and_says_whether_it_is_counted() -> None:
    draft = {"weights_gib": 0.3, "cell_bytes": 1152.0, "is_counted": False, "extra_tokens": 0}
    lines = plan_lines({"model": {**MODEL, "draft": draft}})
    assert [label for label, _ in lines[:2]] == ["model", "draft"]
    assert lines[1][1] == "0.30 GiB of weights and 1,152 B/token of KV per rank, not counted: it takes the headroom"


def test_no_draft_no_line() -> None:
    assert [label for label, _ in plan_lines({"model": {**MODEL, "draft": None}})] == ["model"]
