"""Every `remediate …` example in the README and in each command's --help parses: options exist, values fit."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from remediate.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def _examples(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        command = line.strip().split("  #", 1)[0].strip()
        if command.startswith("remediate ") and "<" not in command:
            found.append(command)
    return found


def _help_examples() -> list[str]:
    texts = [cli.help or ""] + [command.help or "" for command in cli.commands.values()]
    return [example for text in texts for example in _examples(text)]


README = _examples((ROOT / "README.md").read_text())


def test_the_readme_has_examples_for_every_command() -> None:
    used = {shlex.split(example)[1] for example in README}
    assert set(cli.commands) <= used, f"commands without a README example: {set(cli.commands) - used}"


@pytest.mark.parametrize("example", README + _help_examples())
def test_example_parses(example: str) -> None:
    argv = shlex.split(example)[1:]
    name, rest = argv[0], argv[1:]
    ctx = click.Context(cli, info_name="remediate")
    command = cli.get_command(ctx, name)
    assert command is not None, example
    try:
        command.make_context(name, rest, parent=ctx)
    except click.UsageError as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(f"{example}: {exc}")
    assert re.match(r"^[\w@.:*'\" /,%=-]+$", example), example
