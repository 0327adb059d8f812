"""`remediate diagnose` on sandbox hosts, and `remediate oom` refusing when the evidence contradicts it."""

from __future__ import annotations

import pytest

from sandbox.units import incident_unit
from tests.support.node import FAST_KNOBS, REPO, UNIT, UNIT_PATH, Node, poll

pytestmark = pytest.mark.e2e

MIB = 1 << 20
CHANGING = ("daemon-reload", "reset-failed", "restart", "start", "stop")


def _changing(audit: list[str]) -> list[str]:
    return [line for line in audit if line.split(" ", 1)[0] in CHANGING]


def _gpu_read_or_noted(result: dict[str, object]) -> None:
    notes = result["notes"]
    assert isinstance(notes, list)
    assert result["gpus"] or any("nvidia-smi" in n for n in notes), notes


def test_incident_crash_is_a_runtime_oom_with_chunking_and_expandable_segments(incident: Node) -> None:
    node = incident
    for seed in (1, 2):  # two served ≥1k-token requests fragment the pool (stand-in README)
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should crash the server"
    poll(lambda: any("torch.OutOfMemoryError" in line for line in node.journal()), deadline=10, what="the OOM")
    audit_before = node.audit()

    run = node.cli("diagnose", "--since", "1")
    assert run.returncode == 0, run
    result = run.result
    assert result["host"] == node.host.name and result["unit"] == UNIT
    oom = next(f for f in result["findings"] if f["kind"] == "cuda_oom_runtime")
    assert oom["tried_bytes"] == 896 * MIB
    assert oom["reserved_unallocated_bytes"] > 0
    assert oom["phase"] == "prefill" and oom["prefill_tokens"] == 32768
    assert oom["total_bytes"] == round(94.97 * (1 << 30))
    assert any("Scheduler hit an exception" in line for line in oom["evidence"])
    rec = result["recommendation"]
    assert rec["kind"] == "cuda_oom_runtime" and rec["blocking"] is False
    assert rec["chunked_prefill_size"] == 4096
    assert rec["alloc_conf"] == "expandable_segments:True"
    assert isinstance(rec["mem_fraction_static"], float) and rec["mem_fraction_static"] <= 0.94
    reasons = "\n".join(rec["reasons"])
    assert "896.00 MiB needed" in reasons and "short by" in reasons
    assert "reserved but unallocated → expandable_segments:True" in reasons
    assert "32768 tokens prefilled at once" in reasons and "8× smaller" in reasons
    assert rec["command"] == f"remediate oom {node.host.name} --mem-fraction-static {rec['mem_fraction_static']}"
    _gpu_read_or_noted(result)
    assert _changing(node.audit()[len(audit_before) :]) == [], "diagnose is read-only"

    human = node.cli("diagnose", json_out=False)
    assert human.returncode == 0, human
    for part in ("what happened: torch ran out of GPU memory", "896.00 MiB needed", "run: remediate oom"):
        assert part in human.stdout, human.stdout


def test_startup_not_enough_memory_wants_a_higher_fraction_and_oom_refuses(node: Node) -> None:
    text = incident_unit(node.host.address, node.port).replace(
        "--mem-fraction-static 0.94", "--mem-fraction-static 0.75"
    )
    node.install(text, start=False)
    assert node.host.systemctl("start", UNIT).returncode == 0
    poll(lambda: any("Not enough memory" in line for line in node.journal()), deadline=20, what="the startup failure")
    poll(lambda: any("Main process exited" in line for line in node.journal()), deadline=20, what="the exit")

    run = node.cli("diagnose")
    assert run.returncode == 0, run
    result = run.result
    kinds = [f["kind"] for f in result["findings"]]
    assert "kv_pool_too_small_at_startup" in kinds, result["findings"]
    startup = next(f for f in result["findings"] if f["kind"] == "kv_pool_too_small_at_startup")
    assert startup["mem_fraction_static"] == 0.75
    rec = result["recommendation"]
    assert rec["kind"] == "kv_pool_too_small_at_startup" and rec["blocking"] is True
    assert rec["mem_fraction_static"] > 0.75
    assert rec["chunked_prefill_size"] is None and rec["alloc_conf"] is None
    assert any("higher fraction" in r for r in rec["reasons"]), rec["reasons"]
    assert (
        rec["command"].endswith("--force") and f"--mem-fraction-static {rec['mem_fraction_static']}" in rec["command"]
    )

    original = node.bytes(UNIT_PATH)
    audit_before = node.audit()
    refused = node.cli("oom", "--timeout", "30")
    assert refused.returncode == 1, refused
    out = refused.result
    assert out["outcome"] == "failed" and out["changed"] is False
    assert "refusing the OOM recipe" in out["error"] and "kv_pool_too_small_at_startup" in out["error"]
    assert any(f["kind"] == "kv_pool_too_small_at_startup" for f in out["findings"])
    assert node.bytes(UNIT_PATH) == original, "nothing changed"
    assert node.backups(UNIT_PATH) == []
    assert _changing(node.audit()[len(audit_before) :]) == []

    dry = node.cli("oom", "--dry-run")
    assert dry.returncode == 0, dry
    assert any("refuses without --force" in w for w in dry.result["warnings"]), dry.result["warnings"]
    assert node.bytes(UNIT_PATH) == original


def test_graph_capture_oom_at_startup_wants_fewer_graphs_or_a_lower_fraction(node: Node) -> None:
    node.host.set_standin(**FAST_KNOBS, failure="crash_during_load")
    node.install(incident_unit(node.host.address, node.port), start=False)
    assert node.host.systemctl("start", UNIT).returncode == 0
    poll(lambda: any("Capture cuda graph failed" in line for line in node.journal()), deadline=20, what="the crash")

    run = node.cli("diagnose")
    assert run.returncode == 0, run
    rec = run.result["recommendation"]
    assert rec["kind"] == "cuda_oom_graph_capture" and rec["blocking"] is False, rec
    assert any(flag.startswith("--cuda-graph-max-bs") for flag in rec["other_flags"]), rec
    assert rec["mem_fraction_static"] < 0.94
    dry = node.cli("oom", "--dry-run")
    assert dry.returncode == 0 and not any("--force" in w for w in dry.result["warnings"]), dry


@pytest.mark.skipif(
    not (REPO / "sandbox" / "standin" / "sglang" / "gpus.py").exists(),
    reason="needs the stand-in's `neighbour` knob (branch standin)",
)
def test_neighbour_on_one_gpu_is_unbalanced_tp_memory_and_oom_refuses(node: Node) -> None:
    node.host.set_standin(**FAST_KNOBS, neighbour={"pid": 4242, "gib": 12, "gpus": [5]})
    node.install(incident_unit(node.host.address, node.port), start=False)
    assert node.host.systemctl("start", UNIT).returncode == 0
    poll(lambda: any("memory capacity is unbalanced" in line for line in node.journal()), deadline=20, what="it")

    run = node.cli("diagnose")
    assert run.returncode == 0, run
    rec = run.result["recommendation"]
    assert rec["kind"] == "tp_memory_unbalanced" and rec["blocking"] is True, rec
    assert "no knob of ours fixes a neighbour" in rec["reasons"][0]
    original = node.bytes(UNIT_PATH)
    refused = node.cli("oom")
    assert refused.returncode == 1 and "tp_memory_unbalanced" in refused.result["error"], refused
    assert node.bytes(UNIT_PATH) == original and node.backups(UNIT_PATH) == []


def test_healthy_server_diagnoses_nothing_and_oom_is_not_blocked(incident: Node) -> None:
    run = incident.cli("diagnose")
    assert run.returncode == 0, run
    assert run.result["findings"] == []
    assert run.result["recommendation"]["command"] is None
    dry = incident.cli("oom", "--dry-run")
    assert dry.returncode == 0 and not any("--force" in w for w in dry.result["warnings"]), dry


def test_bad_since_is_one_line_exit_2_and_unreachable_is_exit_3(node: Node) -> None:
    bad = node.cli("diagnose", "--since", "last tuesday-ish", json_out=False)
    assert bad.returncode == 2, bad
    assert bad.stderr.count("\n") == 1 and "--since" in bad.stderr
    gone = node.cli("diagnose", "--timeout", "2", target="127.0.0.1:1", ssh_config=False)
    assert gone.returncode == 3, gone
