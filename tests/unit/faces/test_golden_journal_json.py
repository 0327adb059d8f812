"""`diagnose --journal` and `plan --json` on saved journals (sglang's and vLLM's), compared with golden files.

The fast half of tests/e2e/test_golden_json.py: the saved-journal documents (their ``source``, the diagnosis,
the plan) must not change with the result types. Regenerate after an intended change:
``REMEDIATE_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/unit/faces/test_golden_journal_json.py`` and
review the diff of tests/data/golden/journal/.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from remediate.cli.app import cli
from tests.support.journals import BUDGET_LOGS, VLLM_CRASH, VLLM_START

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "data" / "golden" / "journal"
REGEN = os.environ.get("REMEDIATE_REGEN_GOLDEN") == "1"
VLLM_UNIT = "[Service]\nExecStart=/usr/bin/vllm serve /m --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384\n"
PREFIX = "Dec 04 03:25:00 gpu1 vllm[4242]: "


def _normalised(value: Any, tmp: str, key: str = "") -> Any:
    if key in ("started_at", "finished_at", "seconds"):
        return "<VOLATILE>"
    if isinstance(value, dict):
        return {k: _normalised(v, tmp, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalised(v, tmp) for v in value]
    if isinstance(value, str):
        return value.replace(tmp, "<TMP>").replace(str(REPO), "<REPO>")
    return value


def _journal(tmp_path: Path, engine: str) -> list[str]:
    if engine == "sglang":
        return ["--journal", str(BUDGET_LOGS / "standin-incident-crash-0.94.journal")]
    journal, unit = tmp_path / "vllm.journal", tmp_path / "vllm.service"
    journal.write_text("".join(PREFIX + line + "\n" for line in [*VLLM_START, *VLLM_CRASH]))
    unit.write_text(VLLM_UNIT)
    return ["--journal", str(journal), "--unit-file", str(unit)]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("command", ["diagnose", "plan"])
def test_saved_journal_json_matches_its_golden_file(tmp_path: Path, command: str, engine: str) -> None:
    run = CliRunner().invoke(cli, [command, *_journal(tmp_path, engine), "--json"])
    assert run.exit_code == 0, run.output
    got = json.dumps(_normalised(json.loads(run.stdout), str(tmp_path)), indent=1) + "\n"
    path = GOLDEN / f"{command}_{engine}.json"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    want = path.read_text()
    changed = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(path), "now"))
    assert got == want, f"{command} --journal ({engine}): the --json document changed:\n{changed}"
