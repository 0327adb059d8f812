"""`remediate edit` through click's CliRunner on real files: exit codes, diff, --write, --check, --json."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from remediate.cli import cli

ROOT = Path(__file__).resolve().parents[3]
INCIDENT = (ROOT / "examples" / "incident" / "sglang.service").read_text()
SIMPLE = (
    "[Service]\nExecStart=/opt/venv/bin/python3 -m sglang.launch_server --model-path /m --mem-fraction-static 0.9\n"
)


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner(env=env).invoke(cli, ["edit", *map(str, args)])


@pytest.fixture
def unit(tmp_path: Path) -> Path:
    path = tmp_path / "sglang.service"
    path.write_text(INCIDENT)
    return path


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.bak.oom.*"))


def assert_bad_input(result: Result, path: Path, *needles: str) -> None:
    """Exit 2, exactly one stderr line naming the file, no traceback, nothing on stdout."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("remediate: ")
    assert str(path) in lines[0]
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


# -- the happy path ----------------------------------------------------------------------------


def test_edit_prints_diff_and_flag_summary(unit: Path) -> None:
    result = invoke(unit)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "-    --mem-fraction-static 0.94 \\" in out
    assert "+    --mem-fraction-static 0.93 \\" in out
    assert "+Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out
    assert "--mem-fraction-static 0.94 → 0.93 (ExecStart=)" in out
    assert "--chunked-prefill-size (unset) → 4096 (ExecStart=)" in out
    assert "PYTORCH_CUDA_ALLOC_CONF (unset) → expandable_segments:True (Environment=)" in out
    assert result.stderr == ""
    assert unit.read_text() == INCIDENT  # without --write nothing is written
    assert backups(unit) == []


def test_edit_explicit_fraction(unit: Path) -> None:
    result = invoke(unit, "--mem-fraction-static", "0.88", "--chunked-prefill-size", "2048")
    assert result.exit_code == 0, result.output
    assert "--mem-fraction-static 0.94 → 0.88 (ExecStart=)" in result.stdout
    assert "--chunked-prefill-size (unset) → 2048 (ExecStart=)" in result.stdout


def test_check_exits_1_when_changes_are_needed(unit: Path) -> None:
    result = invoke(unit, "--check")
    assert result.exit_code == 1
    assert "0.94 → 0.93" in result.stdout
    assert unit.read_text() == INCIDENT


def test_check_exits_0_after_write(unit: Path) -> None:
    assert invoke(unit, "--write").exit_code == 0
    result = invoke(unit, "--check")
    assert result.exit_code == 0, result.output
    assert "already remediated" in result.stdout
    assert "→" not in result.stdout


@pytest.mark.parametrize("mode", [0o640, 0o600, 0o644])
def test_write_backs_up_original_bytes_and_mode_then_replaces_atomically(unit: Path, mode: int) -> None:
    os.chmod(unit, mode)
    inode = unit.stat().st_ino
    before = time.time()
    result = invoke(unit, "--write")
    after = time.time()
    assert result.exit_code == 0, result.output
    [backup] = backups(unit)
    epoch = int(backup.name.rsplit(".", 1)[1])
    assert int(before) <= epoch <= int(after)
    assert backup.read_bytes() == INCIDENT.encode()
    assert backup.stat().st_mode & 0o7777 == mode
    assert unit.stat().st_mode & 0o7777 == mode
    assert unit.stat().st_ino != inode  # replaced by rename, not rewritten in place
    text = unit.read_text()
    assert "--mem-fraction-static 0.93 \\" in text
    assert "--chunked-prefill-size 4096" in text
    assert "Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" in text
    assert f"wrote {unit} (backup {backup})" in result.stdout
    assert [p.name for p in unit.parent.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_write_picks_a_free_backup_suffix(unit: Path) -> None:
    # The epoch is the wall clock's: occupy the plain and the .1 name for every second this test can take.
    now = int(time.time())
    taken = []
    for epoch in range(now - 1, now + 30):
        for name in (f"{unit.name}.bak.oom.{epoch}", f"{unit.name}.bak.oom.{epoch}.1"):
            (unit.parent / name).write_text("older backup\n")
            taken.append(unit.parent / name)
    result = invoke(unit, "--write")
    assert result.exit_code == 0, result.output
    [new] = [p for p in backups(unit) if p not in taken]
    assert new.name.endswith(".2")
    assert new.read_text() == INCIDENT
    assert all(p.read_text() == "older backup\n" for p in taken)


def test_second_write_changes_nothing(unit: Path) -> None:
    assert invoke(unit, "--write").exit_code == 0
    written = unit.read_bytes()
    inode = unit.stat().st_ino
    result = invoke(unit, "--write")
    assert result.exit_code == 0, result.output
    assert "already remediated" in result.stdout
    assert unit.read_bytes() == written
    assert unit.stat().st_ino == inode
    assert len(backups(unit)) == 1


def test_step_is_not_applied_twice(unit: Path) -> None:
    """The marker records the step: a later run does not lower the fraction again."""
    assert invoke(unit, "--write").exit_code == 0
    assert invoke(unit, "--write", "--mem-fraction-step", "0.02").exit_code == 0
    assert "--mem-fraction-static 0.93 \\" in unit.read_text()


# -- bad input: exit 2, one line naming the file -----------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.service"
    assert_bad_input(invoke(path), path, "no such file")


def test_directory(tmp_path: Path) -> None:
    assert_bad_input(invoke(tmp_path), tmp_path, "directory")


def test_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.service"
    path.write_bytes(b"[Service]\nDescription=caf\xe9\nExecStart=/usr/bin/python3 -m sglang.launch_server\n")
    assert_bad_input(invoke(path, "--write"), path, "UTF-8")
    assert backups(path) == []


def test_unit_without_sglang(tmp_path: Path) -> None:
    path = tmp_path / "web.service"
    path.write_text("[Service]\nExecStart=/usr/bin/nginx -g 'daemon off;'\n")
    assert_bad_input(invoke(path, "--write"), path, "sglang")
    assert backups(path) == []


def test_unit_without_fraction_asks_for_one(tmp_path: Path) -> None:
    path = tmp_path / "sglang.service"
    path.write_text("[Service]\nExecStart=/opt/venv/bin/python3 -m sglang.launch_server --model-path /m\n")
    assert_bad_input(invoke(path), path, "--mem-fraction-static")
    assert invoke(path, "--mem-fraction-static", "0.85").exit_code == 0


def test_fraction_owned_by_environment_file(tmp_path: Path) -> None:
    path = tmp_path / "sglang.service"
    path.write_text(
        "[Service]\nEnvironmentFile=/etc/default/sglang\n"
        "ExecStart=/opt/venv/bin/python3 -m sglang.launch_server $SGLANG_ARGS\n"
    )
    result = invoke(path, "--write")
    assert_bad_input(result, path, "$SGLANG_ARGS", "EnvironmentFile=/etc/default/sglang")
    assert backups(path) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mem-fraction-static", "1.5"], "1.5"),
        (["--mem-fraction-static", "0"], "--mem-fraction-static"),
        (["--chunked-prefill-size", "0"], "--chunked-prefill-size"),
        (["--mem-fraction-static", "0.9", "--mem-fraction-step", "0.02"], "mutually exclusive"),
        (["--mem-fraction-step", "1"], "--mem-fraction-step"),
        (["--alloc-conf", "not valid"], "alloc"),
    ],
    ids=["fraction-1.5", "fraction-0", "chunk-0", "static-and-step", "step-1", "alloc-syntax"],
)
def test_bad_values_exit_2_one_line_nothing_written(unit: Path, args: list[str], needle: str) -> None:
    result = invoke(unit, "--write", *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert "Traceback" not in result.output
    assert unit.read_text() == INCIDENT and backups(unit) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--mem-fraction-static", "1.5"],
        ["--chunked-prefill-size", "0"],
        ["--mem-fraction-static", "0.9", "--mem-fraction-step", "0.02"],
    ],
    ids=["fraction-1.5", "chunk-0", "static-and-step"],
)
def test_bad_values_name_the_file(unit: Path, args: list[str]) -> None:
    assert_bad_input(invoke(unit, *args), unit)


def test_non_number_is_a_usage_error(unit: Path) -> None:
    """click's own usage error: exit 2 as well, no traceback, names the value."""
    result = invoke(unit, "--write", "--mem-fraction-static", "abc")
    assert result.exit_code == 2
    assert "'abc' is not a number" in result.stderr
    assert "Traceback" not in result.output
    assert unit.read_text() == INCIDENT and backups(unit) == []


def test_non_number_is_one_line_naming_the_file(unit: Path) -> None:
    assert_bad_input(invoke(unit, "--mem-fraction-static", "abc"), unit, "abc")


def test_unknown_option_is_click_usage_error(unit: Path) -> None:
    result = invoke(unit, "--frobnicate")
    assert result.exit_code == 2
    assert "No such option" in result.stderr
    assert "Traceback" not in result.output


# -- JSON and secrets --------------------------------------------------------------------------

SECRET_UNIT = (
    "[Service]\n"
    "Environment=HF_TOKEN=hf_abc123\n"
    'Environment="OPENAI_API_KEY=sk-live-999" DB_PASSWORD=hunter2\n'
    "ExecStart=/opt/venv/bin/python3 -m sglang.launch_server --model-path /m --mem-fraction-static 0.9\n"
)
SECRETS = ("hf_abc123", "sk-live-999", "hunter2")


def test_json_is_pure_and_describes_the_plan(unit: Path) -> None:
    result = invoke(unit, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["changed"] is True
    assert document["written"] is False and document["backup"] is None
    changes = {c["setting"]: (c["old"], c["new"]) for c in document["changes"]}
    assert changes == {
        "--mem-fraction-static": ("0.94", "0.93"),
        "--chunked-prefill-size": (None, "4096"),
        "PYTORCH_CUDA_ALLOC_CONF": (None, "expandable_segments:True"),
    }
    assert "+    --mem-fraction-static 0.93 \\" in document["files"][0]["diff"]


def test_json_write_reports_backup(unit: Path) -> None:
    result = invoke(unit, "--json", "--write")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["written"] is True
    assert document["backup"] == str(backups(unit)[0])
    again = json.loads(invoke(unit, "--json", "--write").stdout)
    assert again["changed"] is False and again["written"] is False and again["backup"] is None


@pytest.mark.parametrize("as_json", [False, True], ids=["human", "json"])
def test_secrets_are_masked(tmp_path: Path, as_json: bool) -> None:
    path = tmp_path / "sglang.service"
    path.write_text(SECRET_UNIT)
    result = invoke(path, *(["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    for secret in SECRETS:
        assert secret not in result.output
    if as_json:
        diff = json.loads(result.stdout)["files"][0]["diff"]
        assert "HF_TOKEN=***" in diff
    else:
        assert "HF_TOKEN=***" in result.stdout


def test_secrets_stay_in_the_written_file(tmp_path: Path) -> None:
    path = tmp_path / "sglang.service"
    path.write_text(SECRET_UNIT)
    result = invoke(path, "--write")
    assert result.exit_code == 0, result.output
    assert "Environment=HF_TOKEN=hf_abc123\n" in path.read_text()  # masking is for output only
    assert "hf_abc123" not in result.output


def test_diff_headers_for_a_relative_path(unit: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(unit.parent)
    result = invoke(unit.name)
    assert result.exit_code == 0
    assert "--- a/sglang.service\n+++ b/sglang.service\n" in result.stdout
