"""CLI conventions: --version, --help with an example on every command, REMEDIATE_* env vars, python -m."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from remediate import __version__
from remediate.cli import cli

ROOT = Path(__file__).resolve().parents[3]
INCIDENT = (ROOT / "examples" / "incident" / "sglang.service").read_text()


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for name, command in sorted(group.commands.items()):
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths += _command_paths(command, (*prefix, name))
    return paths


COMMANDS = _command_paths(cli)


def test_the_readme_commands_are_registered() -> None:
    assert {("edit",), ("oom",), ("status",)} <= set(COMMANDS)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    result = CliRunner().invoke(cli, [flag])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"remediate, version {__version__}"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_top_level_help(flag: str) -> None:
    result = CliRunner().invoke(cli, [flag])
    assert result.exit_code == 0
    assert "Example" in result.stdout
    for name, *_rest in COMMANDS:
        assert name in result.stdout


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout
    assert "Example" in result.stdout


def test_no_command_shows_usage() -> None:
    result = CliRunner().invoke(cli, [])
    assert result.exit_code in (0, 2)  # click 8.2 exits 2 for a group invoked without a command
    assert "Usage:" in result.output


def test_options_from_environment(tmp_path: Path) -> None:
    unit = tmp_path / "sglang.service"
    unit.write_text(INCIDENT)
    plain = CliRunner().invoke(cli, ["edit", str(unit)])
    from_env = CliRunner(env={"REMEDIATE_EDIT_MEM_FRACTION_STATIC": "0.9"}).invoke(cli, ["edit", str(unit)])
    assert plain.exit_code == 0 and from_env.exit_code == 0
    assert "--mem-fraction-static 0.94 → 0.93" in plain.stdout
    assert "--mem-fraction-static 0.94 → 0.9 (ExecStart=)" in from_env.stdout


def test_command_line_beats_environment(tmp_path: Path) -> None:
    unit = tmp_path / "sglang.service"
    unit.write_text(INCIDENT)
    runner = CliRunner(env={"REMEDIATE_EDIT_MEM_FRACTION_STATIC": "0.9"})
    result = runner.invoke(cli, ["edit", str(unit), "--mem-fraction-static", "0.8"])
    assert result.exit_code == 0
    assert "0.94 → 0.8 (ExecStart=)" in result.stdout


def test_flag_from_environment(tmp_path: Path) -> None:
    unit = tmp_path / "sglang.service"
    unit.write_text(INCIDENT)
    result = CliRunner(env={"REMEDIATE_EDIT_CHECK": "1"}).invoke(cli, ["edit", str(unit)])
    assert result.exit_code == 1


def test_bad_value_from_environment_is_bad_input(tmp_path: Path) -> None:
    unit = tmp_path / "sglang.service"
    unit.write_text(INCIDENT)
    result = CliRunner(env={"REMEDIATE_EDIT_MEM_FRACTION_STATIC": "1.5"}).invoke(cli, ["edit", str(unit), "--write"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert unit.read_text() == INCIDENT


def test_python_dash_m_version() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "remediate", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == f"remediate, version {__version__}"
    assert completed.stderr == ""
