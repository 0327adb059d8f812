"""The incident's own kind of server, with its draft model (like sglang-k26-ddtree.service): the 32k prefill
kills it, `plan` predicts the pool `oom` then gets within 0.5 % (the draft's share modelled), `oom` fixes it."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.units import incident_unit
from tests.support.node import FAST_KNOBS, Node, poll

pytestmark = pytest.mark.e2e

DRAFT_FLAGS = (
    "    --speculative-algorithm EAGLE3 \\\n"
    "    --speculative-draft-model-path /models/Kimi-K2.6-eagle3 \\\n"
    "    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \\\n"
)


def _with_draft(node: Node) -> str:
    text = incident_unit(node.host.address, node.port)
    assert "    --trust-remote-code\n" in text
    return text.replace("    --trust-remote-code\n", DRAFT_FLAGS + "    --trust-remote-code\n")


def _rows(result: dict[str, Any]) -> dict[float, dict[str, Any]]:
    return {row["mem_fraction_static"]: row for row in result["plan"]["rows"]}


@pytest.mark.parametrize(("version", "is_counted"), [("0.5.6", False), ("0.5.23", True)])
def test_the_speculative_incident_is_planned_and_fixed(node: Node, version: str, is_counted: bool) -> None:
    """Uncounted (the draft lands in the headroom) and counted (both cells size the pool) drafts alike."""
    node.host.set_standin(**FAST_KNOBS, api_version=version)
    node.install(_with_draft(node))
    assert node.generate(2000, 1).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should drop the connection"
    poll(
        lambda: any("torch.OutOfMemoryError: CUDA out of memory" in line for line in node.journal()),
        deadline=10,
        what="the OOM traceback in the journal",
    )
    node.wait_healthy()  # Restart=on-failure brings the 0.94 server back

    planned = node.cli("plan")
    assert planned.returncode == 0, planned
    model = planned.result["plan"]["model"]
    assert model["draft"]["weights_gib"] == pytest.approx(0.30, abs=0.01)
    assert model["draft"]["is_counted"] is is_counted
    assert model["draft"]["cell_bytes"] == pytest.approx(1152, rel=0.02), model  # one MLA layer
    assert any(("NOT counted" in note) is not is_counted for note in model["notes"] if "draft" in note), model
    rows = _rows(planned.result)

    fixed = node.cli("oom", "--timeout", "60")
    assert fixed.returncode == 0 and fixed.result["outcome"] == "remediated", fixed
    fraction = float(fixed.result["flags"]["after"]["mem_fraction_static"])
    measured = fixed.result["max_total_num_tokens"]
    assert measured and rows[fraction]["max_total_num_tokens"] == pytest.approx(measured, rel=0.005)
    assert "--speculative-draft-model-path /models/Kimi-K2.6-eagle3" in node.host.read(
        "/etc/systemd/system/sglang.service"
    )

    assert node.generate(2000, 11).status == 200
    assert node.generate(32768, 13).status == 200, "the 32k prefill must succeed after the fix"
