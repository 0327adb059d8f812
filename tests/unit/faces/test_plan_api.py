"""`plan` through the API with a scripted host; the calibration log; `plan --offline` and `--auto` on the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from remediate import api
from remediate.cli import cli
from remediate.controller import observations
from remediate.core.capacity.headroom import Spike
from remediate.core.capacity.observation import Observation, parse_observations
from remediate.core.startup import parse_server_info
from remediate.core.unitfile.edit import DesiredState, UnitSettings
from remediate.fleet import jobs
from remediate.fleet.inventory import HostEntry
from remediate.host.common.options import BudgetOptions
from remediate.host.plan.budget import auto_desired, diagnosed_spike, evidence_from, plan_budget
from remediate.models import HostResult
from tests.support.fake_transport import FakeTransport
from tests.support.hosts import incident_host
from tests.support.journals import MIB
from tests.support.journals import standin_journal as journal

LOGS = Path(__file__).resolve().parents[2] / "data" / "budget_logs"
SPIKE = Spike(896 * MIB, 32768, int(666.44 * MIB), int(358.40 * MIB), fraction=0.94)
INFO_093 = {
    "mem_fraction_static": 0.93,
    "chunked_prefill_size": 4096,
    "page_size": 1,
    "max_total_tokens": None,
    "max_total_num_tokens": 195011,
    "max_running_requests": None,
    "model_path": "moonshotai/Kimi-K2.6",
    "tp_size": 8,
}


def host(journal_lines: list[str], info: dict[str, object] | None, reply: str | None = None) -> FakeTransport:
    """A host running the incident's unit; ``reply`` replaces what the journal read prints."""
    printed = reply if reply is not None else "\n".join(journal_lines) + "\n"
    fake = incident_host(active="active" if info else "failed", journal=printed, MainPID=42 if info else 0)
    fake.http("/server_info", (200, json.dumps(info)) if info else 404)
    fake.http("/get_server_info", 404)
    return fake


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv(observations.ENV, raising=False)


def test_plan_reads_the_journal_and_the_info_document_and_calibrates() -> None:
    fake = host(journal("standin-kimi-k2.6-tp8-0.93.journal"), INFO_093)
    [result] = api.plan(
        api.PlanRequest(targets=("gpu-01",), target_tokens=200_000), transport_factory=lambda e, o: fake
    )
    assert result.outcome == "unchanged" and result.ok and result.max_total_num_tokens == 195011
    doc = result.plan
    assert doc is not None
    assert doc["current"] == {
        "mem_fraction_static": 0.93,
        "chunked_prefill_size": 4096,
        "expandable_segments": False,
        "max_total_num_tokens": 195011,
    }
    rows = {r["mem_fraction_static"]: r for r in doc["rows"]}
    assert rows[0.93]["current"] and rows[0.93]["max_total_num_tokens"] == 195011
    assert rows[0.94]["max_total_num_tokens"] == pytest.approx(209007, abs=30)
    [calibration] = doc["calibration"]
    assert calibration["measured"] == 195011 and calibration["source"] == "running server"
    assert abs(calibration["error"]) < 0.001 and doc["target_fraction"] == 0.94
    [read] = fake.ran(r"^journalctl -u sglang.service -o cat --no-pager 2>/dev/null \| grep -E ")
    assert "journalctl -u sglang.service -o cat --no-pager -n 5000" in read.command
    assert all("restart" not in c.command and "flock" not in c.command for c in fake.calls)  # read-only


def test_plan_uses_this_hosts_observations(tmp_path: Path) -> None:
    log = tmp_path / "obs.jsonl"
    other = Observation("gpu-02", "moonshotai/Kimi-K2.6", 8, 0.90, 100)
    mine = Observation("gpu-01", "moonshotai/Kimi-K2.6", 8, 0.94, 209007, command="oom", at="2026-12-01T09:00:00Z")
    log.write_text(other.to_json() + "\n" + mine.to_json() + "\n")
    fake = host(journal("standin-kimi-k2.6-tp8-0.93.journal"), INFO_093)
    [result] = api.plan(
        api.PlanRequest(targets=("gpu-01",), observations=str(log)), transport_factory=lambda e, o: fake
    )
    doc = result.plan
    assert doc is not None
    assert [c["measured"] for c in doc["calibration"]] == [209007, 195011]
    rows = {r["mem_fraction_static"]: r["max_total_num_tokens"] for r in doc["rows"]}
    assert rows[0.92] == pytest.approx(181015, abs=3) and rows[0.95] == pytest.approx(223004, abs=3)


def test_plan_of_a_crashed_server_reads_the_crashed_start() -> None:
    fake = host(journal("standin-incident-crash-0.94.journal"), None)
    [result] = api.plan(api.PlanRequest(targets=("gpu-01",)), transport_factory=lambda e, o: fake)
    doc = result.plan
    assert doc is not None
    assert doc["current"]["mem_fraction_static"] == 0.94 and doc["current"]["max_total_num_tokens"] == 209007
    assert {r["mem_fraction_static"]: r["max_total_num_tokens"] for r in doc["rows"]}[0.94] == 209007
    assert not fake.fetched("/server_info")  # the unit is not active: no HTTP


def test_no_startup_lines_no_model() -> None:
    fake = host(["-- No entries --"], INFO_093)
    [result] = api.plan(api.PlanRequest(targets=("gpu-01",)), transport_factory=lambda e, o: fake)
    doc = result.plan
    assert doc is not None
    assert doc["model"] is None and doc["rows"] == []
    assert any("Load weight" in note for note in result.notes)


def test_auto_desired_from_a_spike_and_the_fallback() -> None:
    ev = evidence_from(journal("standin-incident-crash-0.94.journal"), None, UnitSettings("0.94", None, None))
    assert ev.fraction == 0.94 and ev.current.chunked_prefill_size == -1 and not ev.current.is_expandable
    planned = plan_budget(replace(ev, spike=SPIKE, spike_note=None), BudgetOptions(target_tokens=200_000), "gpu-01")
    desired, notes = auto_desired(planned, DesiredState())
    assert (str(desired.mem_fraction_static), desired.chunked_prefill_size, desired.alloc_conf) == (
        "0.94",
        4096,
        "expandable_segments:True",
    )
    assert notes == [
        "--auto: --mem-fraction-static 0.94 (predicted 209,007 tokens), chunk 4096, expandable_segments:True"
    ]
    smaller = plan_budget(
        replace(ev, spike=SPIKE), BudgetOptions(chunked_prefill_size=2048, chunk_is_ceiling=False), "h"
    )
    assert smaller.plan is not None and smaller.plan.proposed.chunked_prefill_size == 2048
    bare = plan_budget(replace(ev, spike=None, spike_note="no runtime CUDA OOM in the journal"), BudgetOptions(), "h")
    same, notes = auto_desired(bare, DesiredState())
    assert same == DesiredState() and "plain recipe" in notes[0] and "no runtime CUDA OOM" in notes[0]


def test_auto_never_raises_the_fraction_that_crashed_unless_allowed() -> None:
    # A smaller spike: with chunk 4096 the plan's 10 % margin would fit at 0.95, above the crash at 0.94.
    ev = evidence_from(journal("standin-incident-crash-0.94.journal"), None, UnitSettings("0.94", None, None))
    small = Spike(400 * MIB, 32768, int(666.44 * MIB), int(358.40 * MIB), fraction=0.94)
    planned = plan_budget(replace(ev, spike=small, spike_note=None), BudgetOptions(), "gpu-01")
    assert planned.plan is not None and planned.plan.chosen is not None and planned.plan.chosen.fraction == 0.95
    desired, notes = auto_desired(planned, DesiredState())
    assert str(desired.mem_fraction_static) == "0.94"
    assert notes[0] == (
        "--auto: the plan would raise --mem-fraction-static to 0.95 (above 0.94, the fraction that crashed); "
        "kept 0.94: pass --allow-raise to let --auto raise it"
    )
    assert notes[1].startswith("--auto: --mem-fraction-static 0.94 (predicted ")
    raised, notes = auto_desired(planned, DesiredState(), allow_raise=True)
    assert str(raised.mem_fraction_static) == "0.95" and len(notes) == 1


def test_allow_raise_without_auto_is_refused() -> None:
    run = CliRunner().invoke(cli, ["oom", "root@gpu-01.example", "--allow-raise", "--dry-run"])
    assert run.exit_code == 2
    assert (
        run.output
        == "remediate: --allow-raise only changes what --auto may choose: add --auto, or drop --allow-raise\n"
    )


def test_evidence_prefers_the_server_over_the_unit() -> None:
    info = parse_server_info({**INFO_093, "chunked_prefill_size": 2048})
    ev = evidence_from(
        [], info, UnitSettings("0.9", "8192", "expandable_segments:True,garbage_collection_threshold:0.6")
    )
    assert (ev.fraction, ev.current.chunked_prefill_size, ev.current.is_expandable) == (0.93, 2048, True)
    assert (ev.model_path, ev.tp_size) == ("moonshotai/Kimi-K2.6", 8)


# ------------------------------------------------------------------------------------ calibration log


def _healthy(unit: str | None = "sglang.service") -> HostResult:
    result = HostResult("gpu-01", outcome="remediated", unit=unit, max_total_num_tokens=195011)
    result.flags_after = {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"}
    result.env_after = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    return result


def test_a_healthy_run_appends_one_record(tmp_path: Path) -> None:
    log = tmp_path / "deep" / "obs.jsonl"
    fake = host(journal("standin-kimi-k2.6-tp8-0.93.journal"), INFO_093)
    job = jobs.observing(lambda t, e: _healthy(), "oom", log)
    entry = HostEntry(name="gpu-01", address="gpu-01")
    job(fake, entry)
    result = job(fake, entry)
    assert result.observation == str(log) and not result.warnings
    records = parse_observations(log.read_text().splitlines())
    assert len(records) == 2 and (log.stat().st_mode & 0o777) == 0o600
    record = records[0]
    assert (record.host, record.model_path, record.tp_size, record.fraction, record.tokens) == (
        "gpu-01",
        "moonshotai/Kimi-K2.6",
        8,
        0.93,
        195011,
    )
    assert (record.free0_gib, record.free1_gib, record.kv_tokens, record.command) == (91.6, 19.17, 195011, "oom")
    assert record.alloc_conf == "expandable_segments:True" and record.at.endswith("Z")


def test_nothing_recorded_for_failures_dry_runs_or_another_server(tmp_path: Path) -> None:
    log = tmp_path / "obs.jsonl"
    fake = host(journal("standin-kimi-k2.6-tp8-0.94.journal"), INFO_093)  # the journal's server reported 209,007
    entry = HostEntry(name="gpu-01", address="gpu-01")
    failed = HostResult("gpu-01", outcome="rolled_back", unit="sglang.service", max_total_num_tokens=195011)
    dry = _healthy()
    dry.is_dry_run = True
    for result in (failed, dry, _healthy()):
        jobs.observing(lambda t, e, r=result: r, "oom", log)(fake, entry)
    assert not log.exists()


def test_an_unwritable_log_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    log = tmp_path / "dir.jsonl"
    log.mkdir()
    fake = host(journal("standin-kimi-k2.6-tp8-0.93.journal"), INFO_093)
    result = jobs.observing(lambda t, e: _healthy(), "oom", log)(fake, HostEntry(name="gpu-01", address="x"))
    assert result.ok and any("observation was not recorded" in w for w in result.warnings)


def test_log_path_and_reading(tmp_path: Path) -> None:
    assert observations.default_path({"XDG_STATE_HOME": "/s"}) == Path("/s/remediate/observations.jsonl")
    assert observations.default_path({"HOME": "/h"}) == Path("/h/.local/state/remediate/observations.jsonl")
    assert observations.default_path({observations.ENV: "/x.jsonl", "XDG_STATE_HOME": "/s"}) == Path("/x.jsonl")
    assert observations.read_observations(tmp_path / "missing.jsonl") == ()
    with pytest.raises(Exception, match="cannot read the observations file"):
        observations.read_observations(tmp_path)


def test_the_calibration_log_lives_in_the_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """REMEDIATE_STATE_DIR moves every controller file, the calibration log too (it was left in XDG's)."""
    assert observations.default_path({"REMEDIATE_STATE_DIR": "/st", "XDG_STATE_HOME": "/s"}) == Path(
        "/st/observations.jsonl"
    )
    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(tmp_path / "st"))
    assert observations.log_path(None) == tmp_path / "st" / "observations.jsonl"
    monkeypatch.setenv(observations.ENV, str(tmp_path / "x.jsonl"))
    assert observations.log_path(None) == tmp_path / "x.jsonl"


# --------------------------------------------------------------------------------------------- CLI

OFFLINE = ["plan", "--offline", "--gpu-mem-gib", "91.6", "--free-after-weights-gib", "19.17", "--cell-bytes", "70272"]


def test_offline_json() -> None:
    run = CliRunner().invoke(cli, [*OFFLINE, "--target-tokens", "200000", "--json"])
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    assert doc["offline"] is True
    plan = doc["plan"]
    assert plan["target_fraction"] == 0.94 and plan["choice"] is None
    rows = {r["mem_fraction_static"]: r for r in plan["rows"]}
    assert rows[0.93]["max_total_num_tokens"] == int((19.17 - 91.6 * 0.07) * 2**30 // 70272)
    assert not any(r["current"] for r in plan["rows"])


def test_offline_table() -> None:
    run = CliRunner().invoke(cli, [*OFFLINE, "--page-size", "64"])
    assert run.exit_code == 0, run.output
    assert "offline plan" in run.stdout and "max_req_input_len" in run.stdout and "starts from 0.79" in run.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "--offline", "--gpu-mem-gib", "80"], "--offline needs --gpu-mem-gib"),
        ([*OFFLINE, "gpu-01"], "--offline plans without a host: drop gpu-01"),
        (["plan", "--offline", "--gpu-mem-gib", "8", "--free-after-weights-gib", "9", "--cell-bytes", "1"], "below"),
        (["oom", "gpu-01", "--auto", "--mem-fraction-static", "0.9"], "--auto chooses the fraction"),
        (["plan", "gpu-01", "--margin", "-1"], "--margin"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str) -> None:
    run = CliRunner().invoke(cli, argv)
    assert run.exit_code == 2, run.output
    assert message in run.output


def test_each_host_is_planned_from_its_own_evidence() -> None:
    fakes = {
        "gpu-01": host(journal("standin-kimi-k2.6-tp8-0.93.journal"), INFO_093),
        "gpu-02": host(journal("standin-incident-crash-0.94.journal"), None),
    }
    results = api.plan(
        api.PlanRequest(targets=("gpu-01", "gpu-02")), transport_factory=lambda entry, options: fakes[entry.name]
    )
    assert [r.host for r in results] == ["gpu-01", "gpu-02"]
    current = [(r.plan or {})["current"]["mem_fraction_static"] for r in results]  # type: ignore[index]
    assert current == [0.93, 0.94]
    assert all(fake.ran(r"^journalctl ") for fake in fakes.values())


def test_a_server_up_for_days_is_planned_from_its_start_far_back() -> None:
    start = journal("standin-kimi-k2.6-tp8-0.93.journal")
    startup = [line for line in start if "avail mem=" in line or "KV Cache" in line or "max_total_num_tokens=" in line]
    access = [f'INFO:     127.0.0.1:{40000 + i} - "POST /generate HTTP/1.1" 200 OK' for i in range(5000)]
    fake = host([], INFO_093, reply="\n".join([*startup, "@@journal-tail", *access]) + "\n")
    [result] = api.plan(api.PlanRequest(targets=("gpu-01",)), transport_factory=lambda e, o: fake)
    doc = result.plan
    assert doc is not None
    assert doc["model"] is not None and doc["model"]["free0_gib"] == 91.6
    assert {r["mem_fraction_static"]: r["max_total_num_tokens"] for r in doc["rows"]}[0.93] == 195011


def test_the_worst_rank_of_the_newest_crash_is_the_spike() -> None:
    lines = journal("standin-incident-crash-0.94.journal")
    first = next(i for i, line in enumerate(lines) if "Scheduler hit an exception" in line)
    last = next(i for i, line in enumerate(lines) if "torch.OutOfMemoryError" in line)
    rank3 = [
        line.replace(" TP0]", " TP3]").replace("666.44 MiB is free", "600.00 MiB is free")
        for line in lines[first : last + 1]
    ]
    spike, note = diagnosed_spike([*lines[:first], *rank3, *lines[first:]])  # TP3 logs first, TP0 last
    assert note is None and spike is not None
    assert (spike.tried_bytes, spike.prefill_tokens, spike.fraction) == (896 * MIB, 32768, 0.94)
    assert spike.free_bytes == 600 * MIB and spike.reserved_unallocated_bytes == int(358.40 * MIB)
