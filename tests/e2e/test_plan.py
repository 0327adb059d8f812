"""`remediate plan` and `oom --auto` on sandbox hosts running the stand-in (issue 12's acceptance)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.node import UNIT_PATH, Node, poll

pytestmark = pytest.mark.e2e


def _rows(result: dict[str, Any]) -> dict[float, dict[str, Any]]:
    return {row["mem_fraction_static"]: row for row in result["plan"]["rows"]}


def _crash(node: Node) -> None:
    """The incident: a 2k request (fragmentation), then the 32k prefill that kills the 0.94 server."""
    assert node.generate(2000, 1).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should drop the connection"
    poll(
        lambda: any("torch.OutOfMemoryError: CUDA out of memory" in line for line in node.journal()),
        deadline=10,
        what="the OOM traceback in the journal",
    )


def test_plan_predicts_the_standin_pool_after_one_observation(incident: Node) -> None:
    node = incident
    fixed = node.cli("oom", "--timeout", "60")
    assert fixed.returncode == 0 and fixed.result["max_total_num_tokens"] == 195011, fixed
    records = [json.loads(line) for line in node.observations.read_text().splitlines()]
    assert len(records) == 1
    (record,) = records
    assert (record["host"], record["fraction"], record["tokens"], record["command"]) == (
        node.host.name,
        0.93,
        195011,
        "oom",
    )
    assert record["model_path"] == "/models/Kimi-K2.6" and record["tp_size"] == 8
    assert (record["free0_gib"], record["free1_gib"], record["alloc_conf"]) == (
        91.6,
        19.17,
        "expandable_segments:True",
    )

    planned = node.cli("plan", "--target-tokens", "200000")
    assert planned.returncode == 0, planned
    result = planned.result
    assert result["outcome"] == "unchanged" and result["max_total_num_tokens"] == 195011
    rows = _rows(result)
    assert rows[0.93]["current"] and rows[0.93]["max_total_num_tokens"] == 195011
    calibration = result["plan"]["calibration"]
    assert calibration and all(abs(c["error"]) < 0.005 for c in calibration)
    assert any(c["measured"] == 195011 and c["text"].startswith("predicted ") for c in calibration)
    assert result["plan"]["target_fraction"] == 0.94

    # What the stand-in really reports at 0.92 and 0.94: the prediction is within 0.5%.
    for fraction in ("0.94", "0.92"):
        run = node.cli("oom", "--mem-fraction-static", fraction, "--timeout", "60")
        assert run.returncode == 0, run
        measured = run.result["max_total_num_tokens"]
        assert rows[float(fraction)]["max_total_num_tokens"] == pytest.approx(measured, rel=0.005), fraction
    back = node.cli("rollback", "--timeout", "60")
    assert back.returncode == 0 and back.result["outcome"] == "restored", back
    last = json.loads(node.observations.read_text().splitlines()[-1])
    assert (last["command"], last["fraction"], last["tokens"]) == ("rollback", 0.94, 209007)
    assert len(node.observations.read_text().splitlines()) == 4


def test_oom_auto_keeps_094_with_chunking_and_expandable_and_survives_the_32k_prefill(incident: Node) -> None:
    node = incident
    _crash(node)
    run = node.cli("oom", "--auto", "--target-tokens", "200000", "--timeout", "60")
    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated", run
    assert result["max_total_num_tokens"] >= 200_000
    assert result["flags"]["after"] == {"mem_fraction_static": "0.94", "chunked_prefill_size": "4096"}
    assert result["env"]["after"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    plan = result["plan"]
    assert plan["choice"]["mem_fraction_static"] == 0.94 and plan["choice"]["meets_target"] is True
    assert plan["spike"]["tried_bytes"] == 896 * 2**20 and plan["spike"]["prefill_tokens"] == 32768
    assert any("--auto: --mem-fraction-static 0.94" in note for note in result["notes"])
    assert not [w for w in result["warnings"] if "cannot both be met" in w]

    # The question the incident left open: 0.94 with chunking and expandable segments survives the 32k prefill.
    for seed in (11, 12, 13):
        assert node.generate(2000, seed).status == 200
    survived = node.generate(32768, 14)
    assert survived.status == 200, survived
    assert "--mem-fraction-static 0.94" in node.host.read(UNIT_PATH)


def test_a_target_the_headroom_cannot_afford_picks_stability_and_says_so(incident: Node) -> None:
    node = incident
    _crash(node)
    planned = node.cli("plan", "--target-tokens", "220000")
    assert planned.returncode == 0, planned
    plan = planned.result["plan"]
    assert plan["choice"]["mem_fraction_static"] == 0.94 and plan["choice"]["meets_target"] is False
    assert plan["target_fraction"] == 0.95 and plan["shortfall_tokens"] == 220_000 - 209_007
    assert any("cannot both be met" in w for w in planned.result["warnings"])
    assert {r["flag"] for r in plan["remedies"]} >= {"--chunked-prefill-size"}
    rows = _rows(planned.result)
    assert rows[0.95]["fits_proposed"]["fits"] is False and rows[0.94]["fits_proposed"]["fits"] is True
    assert rows[0.94]["fits_current"]["fits"] is False  # as it crashed: no chunking, no expandable segments

    human = node.cli("plan", "--target-tokens", "220000", json_out=False)
    assert human.returncode == 0, human
    assert "◀ choice" in human.stdout and "cannot both be met" in human.stdout

    run = node.cli("oom", "--auto", "--target-tokens", "220000", "--timeout", "60")
    assert run.returncode == 0, run
    assert run.result["flags"]["after"]["mem_fraction_static"] == "0.94", run.result["notes"]
    assert run.result["outcome"] == "remediated"
    assert any("cannot both be met" in w for w in run.result["warnings"])


def test_auto_without_evidence_is_the_plain_recipe(incident: Node) -> None:
    run = incident.cli("oom", "--auto", "--dry-run")
    assert run.returncode == 0, run
    assert run.result["flags"]["after"] == {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"}
    assert any("plain recipe" in note for note in run.result["notes"]), run.result["notes"]
    assert run.result["plan"]["choice"] is None
    assert not incident.observations.exists()  # a dry run records nothing


def test_auto_with_a_fraction_is_bad_input(incident: Node) -> None:
    run = incident.cli("oom", "--auto", "--mem-fraction-static", "0.9", json_out=False)
    assert run.returncode == 2 and "--auto chooses the fraction" in run.stderr


def test_plan_offers_no_prediction_where_sglang_sizes_the_pool_after_capture(node: Node) -> None:
    """sglang 0.5.23 with SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 sizes its pool from what the CUDA graphs leave
    (model_runner_components/kv_pool_runtime.py): no fraction → pool rows; status names it."""
    from sandbox.units import incident_unit

    env = "Environment=SGLANG_STANDIN_VERSION=0.5.23\nEnvironment=SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1\n"
    text = incident_unit(node.host.address, node.port)
    node.install(
        text.replace("Environment=CUDA_HOME=/usr/local/cuda\n", "Environment=CUDA_HOME=/usr/local/cuda\n" + env)
    )
    planned = node.cli("plan")
    assert planned.returncode == 0 and planned.result["plan"]["rows"] == [], planned
    assert any("after CUDA-graph capture" in n and "does not apply" in n for n in planned.result["notes"]), planned
    status = node.cli("status")
    assert any("after CUDA-graph capture" in n for n in status.result["notes"]), status
