"""`diagnose --journal` and `plan --journal` on every journal text in tests/data give what the live path gives.

Each text (the diagnosis golden cases, the budget logs, torch's real OOM prints) is rendered as journalctl
would print its entries — ``short``, ``short-precise``, ``short-iso``, ``short-iso-precise``, ``cat`` and
``json`` (some MESSAGEs as byte arrays, entries without MESSAGE, journalctl's markers) — saved to a file and
read through :func:`remediate.api.diagnose_journal`. The reference is the live path's functions on the text
itself: :func:`parse_journal` (whose output tests/unit/core/diagnosis/test_diagnosis_cases.py holds against each case's
``expected.yaml``) and :func:`advise`, in the JSON form a live ``diagnose`` prints (``DiagnosisEvidence``); for
``plan``, the live read's two journalctl reads made with the real ``grep -E`` over the ``-o cat`` text.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from remediate import api
from remediate.core.diagnosis import AdvisorInput, advise, parse_journal
from remediate.core.logline import split_line
from remediate.core.startup import STARTUP_LINES_ERE
from remediate.core.unitfile.edit import UnitSettings
from remediate.host.common.options import BudgetOptions
from remediate.host.diagnose.diagnose import DiagnosisEvidence
from remediate.host.plan.budget import evidence_from, plan_budget, plan_document
from remediate.models import HostResult, UnitState

DATA = Path(__file__).resolve().parents[2] / "data"
TEXTS = sorted(
    [
        *DATA.glob("diagnosis_cases/*/journal.txt"),
        *DATA.glob("budget_logs/*.journal"),
        *DATA.glob("budget_logs/*.log"),
        *(p for p in DATA.glob("torch_oom/*.txt") if not p.name.startswith("nvidia-smi")),
    ]
)
FORMATS = ("short", "short-precise", "short-iso", "short-iso-precise", "cat", "json")
_SYSTEMD_SAID = re.compile(
    r"^(?:Started |Starting |Stopped |Stopping |Failed to start |Scheduled restart|[\w@.-]+\.service: )"
)
_PREFIX = re.compile(r"(?P<host>\S+) (?P<ident>[^\s\[\]:]+)(?:\[(?P<pid>\d+)\])?: ?$")
START = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
DIAGNOSIS_KEYS = {"engine", "findings", "all_findings", "is_stale", "runs", "max_total_num_tokens", "recommendation",
                  "gpus", "gpu_processes", "foreign_gpu_processes"}  # fmt: skip


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def entries(text: str) -> list[tuple[str, str, str | None, str]]:
    """(host, ident, pid, message) of each line: its journal prefix's, else the sglang server's (systemd's for
    systemd's own words, which a ``cat`` journal carries without an identifier)."""
    out: list[tuple[str, str, str | None, str]] = []
    for line in text.splitlines():
        parsed = split_line(0, line)
        if parsed.ident:
            prefix = _PREFIX.search(parsed.raw[: len(parsed.raw) - len(parsed.evidence)])
            assert prefix is not None, line
            out.append((prefix["host"], prefix["ident"], prefix["pid"], parsed.evidence))
        elif _SYSTEMD_SAID.match(line):
            out.append(("gpu-01", "systemd", "1", line))
        else:
            out.append(("gpu-01", "python3", "4711", line))
    return out


def render(text: str, form: str) -> str:
    """``text``'s entries as ``journalctl -o FORM`` prints them (one entry a line, as journald got them)."""
    lines: list[str] = ["-- Logs begin at Mon 2026-11-30 08:00:00 UTC, end at Tue 2026-12-01 09:00:00 UTC. --"]
    if form == "json":
        lines = []
    for i, (host, ident, pid, message) in enumerate(entries(text)):
        when = START + timedelta(milliseconds=i)
        tag = f"{ident}[{pid}]" if pid else ident
        if form == "json":
            entry: dict[str, Any] = {
                "__REALTIME_TIMESTAMP": str(int(when.timestamp() * 1_000_000)),
                "_HOSTNAME": host,
                "SYSLOG_IDENTIFIER": ident,
                "_SYSTEMD_UNIT": "init.scope" if ident == "systemd" else "sglang.service",
                "MESSAGE": list(message.encode()) if i % 7 == 3 else message,  # journalctl's byte arrays
            }
            if pid:
                entry["_PID"] = pid
            if i % 11 == 5:
                lines.append(json.dumps({"__REALTIME_TIMESTAMP": "1", "MESSAGE": None}))  # no text: skipped
            lines.append(json.dumps(entry))
            continue
        stamp = {
            "short": f"{when:%b %d %H:%M:%S}",
            "short-precise": f"{when:%b %d %H:%M:%S.%f}",
            "short-iso": f"{when:%Y-%m-%dT%H:%M:%S}+0000",
            "short-iso-precise": f"{when:%Y-%m-%dT%H:%M:%S.%f}+00:00",
        }.get(form)
        lines.append(message if stamp is None else f"{stamp} {host} {tag}: {message}")
        if i == 2:
            lines.append("-- Boot 0123456789abcdef0123456789abcdef --")
    return "\n".join(lines) + "\n"


def live_diagnosis(text: str) -> dict[str, Any]:
    """What the live diagnose prints for these lines (no systemctl, no GPUs: those are the host's)."""
    diagnosis = parse_journal(text.splitlines(), {})
    result = HostResult(host="gpu-01")
    DiagnosisEvidence(diagnosis, advise(diagnosis, AdvisorInput()), (), (), (), ()).record(result, UnitState(), None)
    return _diagnosis_json(result)


def _diagnosis_json(result: HostResult) -> dict[str, Any]:
    """The diagnosis' part of a result's JSON (not its source nor the unit's state: a live host's)."""
    return {k: v for k, v in result.to_dict().items() if k in DIAGNOSIS_KEYS}


def saved_diagnosis(tmp_path: Path, text: str, form: str) -> dict[str, Any]:
    path = tmp_path / f"saved.{form}"
    path.write_text(render(text, form))
    [result] = api.diagnose_journal(api.DiagnoseRequest(journal=str(path), lines=100_000))
    assert result.error is None and result.source is not None and result.source["format"] == form, result.source
    return _diagnosis_json(result)


def test_every_text_is_read() -> None:
    cases = {p.name for p in DATA.glob("diagnosis_cases/*") if p.is_dir()}
    assert cases == {p.parent.name for p in TEXTS if p.name == "journal.txt"}
    assert {p.parent.name for p in TEXTS} == {*cases, "budget_logs", "torch_oom"}


@pytest.mark.parametrize("path", TEXTS, ids=_name)
@pytest.mark.parametrize("form", FORMATS)
def test_diagnose_journal_gives_the_live_findings(tmp_path: Path, path: Path, form: str) -> None:
    text = path.read_text()
    want = live_diagnosis(text)
    got = saved_diagnosis(tmp_path, text, form)
    got["recommendation"].pop("command")  # names the host: the journal's (the file's for ``cat``)
    want["recommendation"].pop("command")
    assert got == want


@pytest.mark.parametrize("path", TEXTS, ids=_name)
def test_the_saved_text_itself_gives_the_live_findings(tmp_path: Path, path: Path) -> None:
    """The file as it is (the mixed forms of the test data: short, short-iso, cat, raw stderr)."""
    text = path.read_text()
    [result] = api.diagnose_journal(api.DiagnoseRequest(journal=str(path), lines=100_000))
    got = _diagnosis_json(result)
    want = live_diagnosis(text)
    got["recommendation"].pop("command")
    want["recommendation"].pop("command")
    assert got == want


def live_plan(text: str) -> dict[str, Any]:
    """The live plan: ``journalctl -o cat | grep -E ERE | tail -n 400`` and ``journalctl -o cat -n 5000``."""
    cat = "".join(m + "\n" for _, _, _, m in entries(text))
    grep = shutil.which("grep")
    assert grep is not None
    found = subprocess.run([grep, "-E", STARTUP_LINES_ERE], input=cat, capture_output=True, text=True, check=False)
    startup = [line for line in found.stdout.splitlines() if line.strip()][-400:]
    tail = [line for line in cat.splitlines() if line.strip()][-5000:]
    evidence = evidence_from(tail, None, UnitSettings(None, None, None), startup_lines=startup)
    return plan_document(plan_budget(evidence, BudgetOptions(), "gpu-01"))


PLANNED = [p for p in TEXTS if "server_args=" in p.read_text() and "avail mem=" in p.read_text()]


@pytest.mark.parametrize("path", PLANNED, ids=_name)
@pytest.mark.parametrize("form", FORMATS)
def test_plan_journal_gives_the_live_plan(tmp_path: Path, path: Path, form: str) -> None:
    text = path.read_text()
    saved = tmp_path / f"saved.{form}"
    saved.write_text(render(text, form))
    [result] = api.plan_journal(api.PlanRequest(journal=str(saved), observations=str(tmp_path / "none.jsonl")))
    assert result.error is None
    assert result.plan == live_plan(text)


def test_some_plans_are_made() -> None:
    assert len(PLANNED) >= 4
    assert any(live_plan(p.read_text())["rows"] for p in PLANNED)


SHOWN = sorted(p.parent for p in DATA.glob("diagnosis_cases/*/show.txt"))


@pytest.mark.parametrize("case", SHOWN, ids=lambda p: p.name)
def test_what_systemctl_show_adds_is_only_the_restart_count(tmp_path: Path, case: Path) -> None:
    """A live host also reads ``systemctl show`` (absent from a saved journal): the same findings, but the
    crash loop's ``restarts`` is the journal's own restart counter, not NRestarts."""
    lines = (case / "journal.txt").read_text().splitlines()
    show = dict(line.split("=", 1) for line in (case / "show.txt").read_text().splitlines() if "=" in line)
    live = [f.to_dict() for f in parse_journal(lines, show).findings]
    [result] = api.diagnose_journal(api.DiagnoseRequest(journal=str(case / "journal.txt")))
    absent = result.source["absent"] if result.source is not None else None
    assert isinstance(absent, list) and absent[0] == "systemctl"
    saved = [f.to_dict() for f in parse_journal(lines, {}).findings]
    assert result.diagnosis is not None and result.diagnosis.all_findings == len(saved) == len(live)
    for have, want in zip(saved, live, strict=True):
        assert {k: v for k, v in have.items() if k != "restarts"} == {k: v for k, v in want.items() if k != "restarts"}
    assert any(f["kind"] == "crash_loop" for f in saved)
