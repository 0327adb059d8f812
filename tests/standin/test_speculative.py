"""The stand-in's draft model: the draft worker's own startup lines and its memory (weights + a pool of the
target's token count), uncounted before the api_version knob's DRAFT_COUNTED_FROM and counted after."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.support.standin_proc import INCIDENT

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandbox" / "standin"))

from sglang import memory  # noqa: E402

pytestmark = pytest.mark.integration

P, D = memory.KIMI_K26_TP8, memory.KIMI_K26_DRAFT
DRAFT = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/k26-eagle3"]
TP0 = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] "
LINE_RE = re.compile(
    TP0 + r"(Load weight begin\. avail mem=([\d.]+)|Load weight end\. type=(\w+).*?avail mem=([\d.]+) GB"
    r"|KV Cache is allocated\. #tokens: (\d+), KV size: ([\d.]+)|max_total_num_tokens=(\d+))",
    re.M,
)


def _tp0(out: str) -> list[tuple[str, ...]]:
    """TP0's memory lines in order: ("begin", avail) / ("end", type, avail) / ("kv", tokens, GiB) / ("cap", n)."""
    rows: list[tuple[str, ...]] = []
    for m in LINE_RE.finditer(out):
        if m.group(2):
            rows.append(("begin", m.group(2)))
        elif m.group(3):
            rows.append(("end", m.group(3), m.group(4)))
        elif m.group(5):
            rows.append(("kv", m.group(5), m.group(6)))
        else:
            rows.append(("cap", m.group(7)))
    return rows


def test_an_uncounted_draft_loads_after_the_targets_pool_and_takes_its_headroom(start) -> None:
    srv = start([*INCIDENT, *DRAFT], {"api_version": "0.5.6"})
    srv.wait_healthy()
    rows = _tp0(srv.output())
    assert [r[0] for r in rows] == ["begin", "end", "kv", "begin", "end", "kv", "cap"]
    free0, free1 = float(rows[0][1]), float(rows[1][2])
    tokens = int(rows[2][1])
    expect = int((free1 - free0 * (1 - 0.94)) * (1 << 30) // memory.kv_cell_bytes(P))  # the target alone
    assert abs(tokens - expect) <= expect * 1e-3  # the logged GiB are rounded to 0.01
    assert rows[4][1] == D.architecture and rows[5][1] == str(tokens)  # the draft's pool: the target's tokens
    assert round(float(rows[3][1]) - float(rows[4][2]), 2) == round(memory.draft_weight_per_rank(D, 8), 2)
    assert int(rows[6][1]) == tokens


def test_a_counted_draft_loads_first_and_the_pool_divides_by_both_cells(start) -> None:
    srv = start([*INCIDENT, *DRAFT], {"api_version": "0.5.23"})
    srv.wait_healthy()
    rows = _tp0(srv.output())
    assert [r[0] for r in rows] == ["begin", "end", "begin", "end", "kv", "kv", "cap"]
    free0, after_both = float(rows[0][1]), float(rows[3][2])
    cells = memory.kv_cell_bytes(P) + memory.draft_cell_bytes(P, D)
    expect = int((after_both - free0 * (1 - 0.94)) * (1 << 30) // cells)
    assert abs(int(rows[4][1]) - expect) <= expect * 1e-3  # the logged GiB are rounded to 0.01
    assert rows[4][1] == rows[5][1] == rows[6][1]


def test_the_draft_shrinks_what_a_fresh_server_has_free() -> None:
    plain = memory.plan_memory(P, 0.94)
    uncounted = memory.plan_memory(P, 0.94, draft=D)
    counted = memory.plan_memory(P, 0.94, draft=D, version=(0, 5, 23))
    assert uncounted.max_total_num_tokens == plain.max_total_num_tokens
    assert uncounted.available < plain.available  # the headroom holds the draft
    assert counted.max_total_num_tokens < plain.max_total_num_tokens  # the pool makes room for it instead
    assert counted.available == pytest.approx(plain.available - (counted.req_to_token - plain.req_to_token), abs=0.02)


def test_a_draft_algorithm_without_a_draft_model_is_refused_at_once(start) -> None:
    srv = start([*INCIDENT, "--speculative-algorithm", "EAGLE"])
    assert srv.wait_exit() == 1
    assert "--speculative-draft-model-path is required" in srv.output()
