"""`diagnose --journal` and `plan --journal` on journals saved from a sandbox host give the live commands' answers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.node import UNIT, UNIT_PATH, Node, poll, remediate_argv, run_cli

pytestmark = pytest.mark.e2e

FORMS = ("short", "short-precise", "short-iso", "short-iso-precise", "json", "cat")
# What only the live read has (state, GPUs) or names differently (the command names the host or the file)
LIVE_ONLY = ("active_state", "sub_state", "n_restarts", "gpus", "gpu_processes", "foreign_gpu_processes")


def _crashed(node: Node) -> None:
    """The incident: two served requests fragment the pool, the 32k prefill kills the 0.94 server; then stopped."""
    for seed in (1, 2):
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should crash the server"
    poll(lambda: any("torch.OutOfMemoryError" in line for line in node.journal()), deadline=10, what="the OOM")
    # the unit restarts on failure: stopped, its journal stays as it is while the live and saved reads are made
    poll(lambda: any("Main process exited" in line for line in node.journal()), deadline=20, what="the exit")
    assert node.host.systemctl("stop", UNIT).returncode == 0
    poll(lambda: node.show("ActiveState")["ActiveState"] in ("failed", "inactive"), deadline=20, what="the stop")


def _findings(result: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in result.items() if k in ("findings", "all_findings", "is_stale", "runs", "recommendation")}
    out["recommendation"] = {k: v for k, v in out["recommendation"].items() if k != "command"}
    return out


def _saved(node: Node, form: str) -> str:
    path = node.tmp_path / f"sglang.{form}"
    path.write_text(node.host.run("journalctl", "-u", UNIT, "-o", form, "--no-pager", check=True).stdout)
    return str(path)


def _from_journal(node: Node, command: str, *args: str) -> Any:
    run = run_cli(remediate_argv(command, *args, "--json"), cwd=node.tmp_path, env=node.env())
    assert run.returncode == 0, run
    return run.result


def test_a_saved_journal_gives_the_live_diagnosis_and_plan(incident: Node) -> None:
    node = incident
    _crashed(node)
    unit_file = node.tmp_path / "sglang.service"
    unit_file.write_bytes(node.bytes(UNIT_PATH))
    live = node.cli("diagnose")
    assert live.returncode == 0, live
    assert any(f["kind"] == "cuda_oom_runtime" for f in live.result["findings"])
    planned = node.cli("plan")
    assert planned.returncode == 0, planned
    assert planned.result["plan"]["rows"] and planned.result["plan"]["spike"], planned.result["plan"]
    hostname = node.host.run("hostname", check=True).stdout.strip()

    for form in FORMS:
        saved = _saved(node, form)
        result = _from_journal(node, "diagnose", "--journal", saved, "--unit-file", str(unit_file))
        assert result["source"]["format"] == form
        assert result["source"]["absent"] == ["systemctl", "nvidia-smi", "ps"]
        assert _findings(result) == _findings(live.result), form
        assert all(result[k] in (None, []) for k in LIVE_ONLY)
        assert result["host"] == (saved if form == "cat" else hostname)  # cat has no host: the file names it
        plan = _from_journal(node, "plan", "--journal", saved, "--unit-file", str(unit_file))
        # the server is down after the crash: the live plan had no /server_info to read either
        assert plan["plan"] == planned.result["plan"], form
        assert plan["max_total_num_tokens"] == planned.result["max_total_num_tokens"]
