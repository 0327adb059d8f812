"""Every command's ``--json`` on one sandbox host, compared with golden files (tests/data/golden/e2e/).

The result documents (their keys in order too) are the tool's contract with scripts, the Ansible modules
and the watcher: a refactor of the result types must not change one byte of them. One host walks the
incident once: status, plan, oom --dry-run, the 32k crash, diagnose, oom --auto --dry-run, oom (the fix),
status, plan, backups, rollback --dry-run, oom --probe, rollback. Volatile values (times, seconds, rates,
addresses, ports, PIDs, epochs in backup names, digests, temporary paths) are normalised first.

Regenerate after an intended change: ``REMEDIATE_REGEN_GOLDEN=1 SANDBOX_FLEET_SIZE=1 .venv/bin/python -m pytest
tests/e2e/test_golden_json.py`` and review the diff of tests/data/golden/e2e/.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.node import REPO, Node, poll

pytestmark = pytest.mark.e2e

GOLDEN = REPO / "tests" / "data" / "golden" / "e2e"
REGEN = os.environ.get("REMEDIATE_REGEN_GOLDEN") == "1"
# Times, rates, and what the address and port inside a unit file change (its backups' size and digest).
VOLATILE_KEYS = {"started_at", "finished_at", "seconds", "time", "ttft_s", "prefill_tok_s", "sha256", "size"}
FINDING_KEYS = {"index"}  # a finding's line number in the journal: the TP ranks' lines interleave at random


def _scrub(text: str, node: Node) -> str:
    text = (
        text.replace(os.environ["REMEDIATE_STATE_DIR"], "<STATE>")
        .replace(str(node.tmp_path), "<TMP>")
        .replace(node.host.address, "<ADDR>")
    )
    text = text.replace(f":{node.port}", ":<PORT>").replace(f" {node.port}", " <PORT>")
    text = text.replace(node.host.name, "<HOST>")
    text = re.sub(r"\.bak\.(\w+)\.\d{9,}", r".bak.\1.<EPOCH>", text)
    text = re.sub(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:?\d\d|Z| UTC)?", "<TIME>", text)
    text = re.sub(r"sha256\((.*?)\) == [0-9a-f]{12}", r"sha256(\1) == <SHA>", text)
    text = re.sub(r"\b(pid|PID|MainPID)[= ]\d+", r"\1=<PID>", text)
    return re.sub(r"\b\d+(\.\d+)? ?s\b", "<N>s", text)


def normalised(value: Any, node: Node, key: str = "") -> Any:
    """``value`` with the volatile parts replaced by placeholders."""
    if key in VOLATILE_KEYS and value is not None and not isinstance(value, bool | dict | list):
        return "<VOLATILE>"
    if isinstance(value, dict):
        volatile = FINDING_KEYS if "evidence" in value else set()
        return {_scrub(k, node): "<VOLATILE>" if k in volatile else normalised(v, node, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v, node) for v in value]
    if isinstance(value, str):
        return _scrub(value, node)
    return value


def _check(node: Node, name: str, *args: str, code: int = 0) -> None:
    run = node.cli(*args)
    assert run.returncode == code, run
    assert run.document is not None, run
    got = json.dumps(normalised(run.document, node), indent=1) + "\n"
    path = GOLDEN / f"{name}.json"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"{path} is missing: regenerate it (this module's docstring says how)"
    want = path.read_text()
    changed = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(path), name))
    assert got == want, f"{name}: the --json document changed:\n{changed}"


def test_every_command_json_matches_its_golden_file(incident: Node) -> None:
    node = incident
    wait = ("--wait-timeout", "60")
    _check(node, "status_before", "status")
    _check(node, "plan_before", "plan", "--target-tokens", "200000")
    _check(node, "oom_dry_run", "oom", "--dry-run")

    assert node.generate(2000, 1).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should drop the connection"
    poll(lambda: any("torch.OutOfMemoryError" in line for line in node.journal()), deadline=10, what="the OOM")
    _check(node, "diagnose", "diagnose", "--since", "1")
    _check(node, "oom_auto_dry_run", "oom", "--auto", "--target-tokens", "200000", "--dry-run")

    _check(node, "oom", "oom", *wait)
    _check(node, "status_after", "status")
    _check(node, "plan_after", "plan", "--target-tokens", "200000")
    _check(node, "backups", "backups")
    _check(node, "rollback_dry_run", "rollback", "--dry-run")
    _check(node, "oom_probe", "oom", "--probe", "32768", *wait)
    _check(node, "rollback", "rollback", *wait)


def test_golden_files_are_all_used() -> None:
    names = {p.stem for p in GOLDEN.glob("*.json")}
    source = Path(__file__).read_text()
    assert names and all(f'"{n}"' in source for n in names), names
