"""`diagnose --journal` and `plan --journal` through click's CliRunner on real files: bad input, stdin, the
size cap, the unit file's settings, the JSON ``source`` document, secrets masked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from remediate.api import journal as api_journal
from remediate.cli import cli

DATA = Path(__file__).resolve().parents[2] / "data"
ROOT = Path(__file__).resolve().parents[3]
INCIDENT = DATA / "diagnosis_cases" / "incident-kimi-tp8" / "journal.txt"
CRASH = DATA / "budget_logs" / "standin-incident-crash-0.94.journal"
UNIT = ROOT / "examples" / "incident" / "sglang.service"


def invoke(*args: str | Path, stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(cli, list(map(str, args)), input=stdin)


def assert_bad_input(result: Result, *needles: str) -> None:
    """Exit 2, one stderr line naming what was wrong, nothing on stdout."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["diagnose", "plan"])
def test_journal_with_a_target_or_an_inventory_is_bad_input(command: str, tmp_path: Path) -> None:
    assert_bad_input(invoke(command, "gpu-01", "--journal", INCIDENT), "--journal", "gpu-01")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts: {}\n")
    assert_bad_input(invoke(command, "--journal", INCIDENT, "-i", inventory), "--journal", "--inventory")
    assert_bad_input(invoke(command, "--journal", INCIDENT, "--local"), "--journal", "--local")


@pytest.mark.parametrize("command", ["diagnose", "plan"])
def test_unit_file_without_journal_is_bad_input(command: str) -> None:
    assert_bad_input(invoke(command, "gpu-01", "--unit-file", UNIT), "--unit-file", "--journal")


@pytest.mark.parametrize("command", ["diagnose", "plan"])
@pytest.mark.parametrize("unit", ["sglang@*", "sglang-chat,sglang-embed"])
def test_a_glob_or_several_units_with_journal_is_bad_input(command: str, unit: str) -> None:
    # a saved journal is one unit's: `--unit` names it exactly
    assert_bad_input(invoke(command, "--journal", INCIDENT, "--unit", unit), "--unit", unit, "--journal")


@pytest.mark.parametrize("command", ["diagnose", "plan"])
def test_a_missing_or_unreadable_journal_is_bad_input_naming_it(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.journal"
    assert_bad_input(invoke(command, "--journal", missing), str(missing), "no such file")
    assert_bad_input(invoke(command, "--journal", tmp_path), str(tmp_path), "directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file")
def test_an_unreadable_journal_is_bad_input_naming_it(tmp_path: Path) -> None:
    locked = tmp_path / "locked.journal"
    locked.write_text("x\n")
    locked.chmod(0)
    assert_bad_input(invoke("diagnose", "--journal", locked), str(locked), "permission denied")


@pytest.mark.parametrize("command", ["diagnose", "plan"])
def test_a_journal_past_the_cap_is_bad_input_naming_it(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_journal, "MAX_JOURNAL_BYTES", 1000)  # the real cap, 64 MiB, is the same code path
    big = tmp_path / "big.journal"
    big.write_bytes(INCIDENT.read_bytes()[:1001])
    assert_bad_input(invoke(command, "--journal", big), str(big), "larger than")
    assert_bad_input(invoke(command, "--journal", "-", stdin=b"x" * 1001), "-:", "larger than")
    ok = tmp_path / "ok.journal"
    ok.write_bytes(INCIDENT.read_bytes()[:1000])
    assert invoke(command, "--journal", ok).exit_code == 0


def test_the_unit_files_problems_are_bad_input_naming_it(tmp_path: Path) -> None:
    assert_bad_input(invoke("diagnose", "--journal", INCIDENT, "--unit-file", tmp_path / "x.service"), "x.service")
    other = tmp_path / "other.service"
    other.write_text("[Service]\nExecStart=/usr/bin/sleep 1\n")
    assert_bad_input(invoke("plan", "--journal", INCIDENT, "--unit-file", other), str(other), "--unit-file")


def test_journal_and_offline_is_bad_input() -> None:
    assert_bad_input(invoke("plan", "--journal", CRASH, "--offline"), "--journal", "--offline")


def test_since_a_time_needs_a_host() -> None:
    assert_bad_input(invoke("diagnose", "--journal", INCIDENT, "--since", "2 hours ago"), "--since", "--journal")


def test_diagnose_from_stdin_and_from_the_file_say_the_same() -> None:
    from_file = invoke("diagnose", "--journal", INCIDENT, "--json")
    from_stdin = invoke("diagnose", "--journal", "-", "--json", stdin=INCIDENT.read_bytes())
    assert from_file.exit_code == from_stdin.exit_code == 0, from_file.stderr + from_stdin.stderr
    [a], [b] = json.loads(from_file.stdout)["results"], json.loads(from_stdin.stdout)["results"]
    assert a["findings"] == b["findings"] and a["recommendation"] == b["recommendation"]
    assert a["source"]["journal"] == str(INCIDENT) and b["source"]["journal"] == "-"


def test_diagnose_json_names_what_is_absent() -> None:
    result = invoke("diagnose", "--journal", INCIDENT, "--json")
    assert result.exit_code == 0, result.stderr
    [doc] = json.loads(result.stdout)["results"]
    assert doc["source"] == {
        "journal": str(INCIDENT),
        "format": "short",
        "lines": 64,
        "skipped": 0,
        "hosts": ["gpu-01"],
        "units": ["sglang.service"],
        "unit_file": None,
        "settings": "journal",
        "absent": ["systemctl", "nvidia-smi", "ps"],
    }
    assert (doc["host"], doc["unit"], doc["outcome"]) == ("gpu-01", "sglang.service", "unchanged")
    assert (doc["active_state"], doc["n_restarts"], doc["gpus"]) == (None, None, [])
    assert [f["kind"] for f in doc["findings"]] == ["cuda_oom_runtime"]
    assert doc["recommendation"]["command"].startswith("remediate oom gpu-01 --unit sglang.service ")


def test_diagnose_text_says_it_read_a_saved_journal() -> None:
    result = invoke("diagnose", "--journal", INCIDENT)
    assert result.exit_code == 0, result.stderr
    assert f"saved journal {INCIDENT} (short); absent: systemctl, nvidia-smi, ps" in result.stdout
    assert "what happened: torch ran out of GPU memory while serving" in result.stdout


def test_the_unit_files_settings_are_advised_from(tmp_path: Path) -> None:
    unit = tmp_path / "sglang.service"
    unit.write_text(UNIT.read_text().replace("--mem-fraction-static 0.94", "--mem-fraction-static 0.9"))
    result = invoke("diagnose", "--journal", INCIDENT, "--unit-file", unit, "--unit", "sglang-k26.service", "--json")
    assert result.exit_code == 0, result.stderr
    [doc] = json.loads(result.stdout)["results"]
    assert (doc["source"]["settings"], doc["source"]["unit_file"], doc["unit_path"]) == (
        "unit_file",
        str(unit),
        str(unit),
    )
    assert doc["unit"] == "sglang-k26.service"
    assert doc["recommendation"]["mem_fraction_static"] == 0.9  # the unit's, not the logged 0.94
    assert "--unit sglang-k26.service" in doc["recommendation"]["command"]


def test_no_settings_anywhere_is_said(tmp_path: Path) -> None:
    journal = tmp_path / "plain.txt"
    journal.write_text("hello\n")
    [doc] = json.loads(invoke("diagnose", "--journal", journal, "--json").stdout)["results"]
    assert doc["source"]["settings"] is None and doc["source"]["format"] == "cat"
    assert any("settings are unknown" in note for note in doc["notes"])
    assert doc["host"] == str(journal)  # no host in a cat journal: the file names the result


def test_secrets_in_the_journal_are_masked(tmp_path: Path) -> None:
    lines = INCIDENT.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "torch.OutOfMemoryError" in line)
    lines[at] += " api_key='sk-SECRET-1' HF_TOKEN=hf_SECRET"
    text = "\n".join(lines)
    journal = tmp_path / "secret.journal"
    journal.write_text(text.replace("host='127.0.0.1')", "host='127.0.0.1', api_key='sk-SECRET-2')"))
    [doc] = json.loads(invoke("diagnose", "--journal", journal, "--json").stdout)["results"]
    [evidence] = [line for line in doc["findings"][0]["evidence"] if "OutOfMemoryError" in line]
    assert "api_key=***" in evidence and "HF_TOKEN=***" in evidence  # shown, masked
    for command in ("diagnose", "plan"):
        for as_json in ((), ("--json",)):
            result = invoke(command, "--journal", journal, *as_json)
            assert result.exit_code == 0, result.stderr
            assert "SECRET" not in result.stdout, command


def test_plan_from_a_journal_names_server_info_as_absent() -> None:
    result = invoke("plan", "--journal", CRASH, "--json")
    assert result.exit_code == 0, result.stderr
    [doc] = json.loads(result.stdout)["results"]
    assert doc["source"]["absent"] == ["systemctl", "server_info"]
    assert doc["plan"]["choice"]["mem_fraction_static"] == 0.94
    assert doc["max_total_num_tokens"] == doc["plan"]["current"]["max_total_num_tokens"]
    text = invoke("plan", "--journal", CRASH)
    assert "◀ choice" in text.stdout and "absent: systemctl, server_info" in text.stdout


def test_plan_with_the_unit_file(tmp_path: Path) -> None:
    result = invoke("plan", "--journal", CRASH, "--unit-file", UNIT, "--target-tokens", "200000", "--json")
    assert result.exit_code == 0, result.stderr
    [doc] = json.loads(result.stdout)["results"]
    assert doc["source"]["settings"] == "unit_file"
    assert doc["target_tokens"] == 200000 and doc["unit"] == "sglang.service"
