"""Safety options are never read from ``REMEDIATE_<COMMAND>_<OPTION>``, for EVERY command of the group.

The list of commands is the click group itself: a command added later is covered without editing a list
(``plan`` and ``bench`` were once missing from a hand-written one, and their variables were silently ignored).
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from remediate.cli import cli

SAFETY_FLAGS = (
    "--accept-new-host-key",
    "--no-rollback",
    "--yes",
    "--force",
    "--all-instances",
    "--allow-raise",
    "--resume",
)


def _commands(group: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command below ``group`` with its path (``("watch", "run")``): subgroups' commands too."""
    found = []
    for name, command in (group.commands if isinstance(group, click.Group) else {}).items():
        found.append(((*path, name), command))
        found.extend(_commands(command, (*path, name)))
    return found


NESTED = [path for path, _ in _commands(cli) if len(path) > 1]


def _variable(command: str, flag: str) -> str:
    return f"REMEDIATE_{command}_{flag.removeprefix('--')}".upper().replace("-", "_")


@pytest.fixture(autouse=True)
def _no_inventory_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # nothing to select: a command that got past the refusal fails on its input


def test_the_group_has_every_command() -> None:
    assert {"edit", "oom", "rollback", "status", "diagnose", "backups", "plan", "bench"} <= set(cli.commands)


@pytest.mark.parametrize("command", sorted(cli.commands))
@pytest.mark.parametrize("flag", SAFETY_FLAGS)
def test_a_safety_option_from_the_environment_is_refused(command: str, flag: str) -> None:
    variable = _variable(command, flag)
    result = CliRunner(env={variable: "1"}).invoke(cli, [command])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"remediate: {variable} is set: safety options are never read from the environment; pass {flag}\n"
    )


def test_every_option_kept_off_the_environment_is_refused_there() -> None:
    """An option declared ``allow_from_autoenv=False`` is a safety option: its variable is refused, not ignored."""
    kept_off = {
        option.opts[0]
        for _, command in _commands(cli)
        for option in command.params
        if isinstance(option, click.Option) and not option.allow_from_autoenv
    }
    assert kept_off <= set(SAFETY_FLAGS)


def test_the_group_has_nested_commands() -> None:
    assert ("watch", "run") in NESTED


@pytest.mark.parametrize("path", NESTED, ids="_".join)
@pytest.mark.parametrize("flag", ["--accept-new-host-key", "--resume"])
def test_a_safety_option_of_a_subcommand_from_the_environment_is_refused(path: tuple[str, ...], flag: str) -> None:
    """``REMEDIATE_WATCH_RUN_ACCEPT_NEW_HOST_KEY``: click's variable for a subgroup's command is refused too."""
    variable = _variable("_".join(path), flag)
    result = CliRunner(env={variable: "1"}).invoke(cli, list(path))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"remediate: {variable} is set: safety options are never read from the environment; pass {flag}\n"
    )
