"""Every command of the command line declares its parameters by name and type: click passes each option by
name, mypy checks every use. No ``**kw``, no ``Any``, no parameter click does not pass (nor one it passes that
the function does not declare). (The api's side: tests/unit/faces/test_api_front_door.py.)"""

from __future__ import annotations

import inspect
from typing import Any

import click
import pytest

from remediate.cli import cli


def _commands(group: click.Command, prefix: str = "") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, command in (group.commands if isinstance(group, click.Group) else {}).items():
        path = f"{prefix} {name}".strip()
        found.append((path, command))
        found.extend(_commands(command, path))
    return found


COMMANDS = [(path, command) for path, command in _commands(cli) if command.callback is not None]


def test_every_command_is_walked() -> None:
    names = {path for path, _ in COMMANDS}
    assert {"oom", "rollback", "backups", "status", "diagnose", "plan", "bench", "edit", "watch run"} <= names


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[path for path, _ in COMMANDS])
def test_a_command_declares_each_parameter_with_a_type(path: str, command: click.Command) -> None:
    assert command.callback is not None
    params = inspect.signature(command.callback).parameters  # through handle_errors (functools.wraps)
    kinds = {p.kind for p in params.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{path}: **kwargs"
    assert inspect.Parameter.VAR_POSITIONAL not in kinds, f"{path}: *args"
    for name, param in params.items():
        annotation = param.annotation
        assert annotation is not inspect.Parameter.empty, f"{path}: {name} has no type"
        assert "Any" not in str(annotation), f"{path}: {name} is {annotation}"
    passed = {p.name for p in command.params if p.expose_value}
    assert set(params) == passed, (path, set(params) ^ passed)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[path for path, _ in COMMANDS])
def test_a_flag_is_a_bool_and_a_variadic_argument_a_tuple(path: str, command: click.Command) -> None:
    assert command.callback is not None
    params = inspect.signature(command.callback).parameters
    for option in command.params:
        if not option.expose_value or option.name is None:
            continue
        annotation = str(params[option.name].annotation)
        if isinstance(option, click.Option) and option.is_flag:
            assert annotation == "bool", (path, option.name, annotation)
        if option.nargs == -1:
            assert annotation.startswith("tuple["), (path, option.name, annotation)


def _bad(**kw: object) -> None:
    """A command callback as they were: every option in one untyped mapping."""


def _untyped(targets, unit: str | None) -> None:  # type: ignore[no-untyped-def]
    """A parameter without a type."""


def _any(targets: tuple[str, ...], unit: Any) -> None:
    """A parameter typed ``Any``: nothing checked."""


@pytest.mark.parametrize("callback", [_bad, _untyped, _any])
def test_the_check_fails_on_an_untyped_command(callback: object) -> None:
    """A check that cannot fail proves nothing: the shapes this test exists to refuse are refused."""
    command = click.command()(click.argument("targets", nargs=-1)(click.option("--unit")(callback)))  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        test_a_command_declares_each_parameter_with_a_type("bad", command)
