"""Every `remediate …` example in the README, in docs/ (every folder) and in each command's --help parses:
options exist, values fit. Every option named in an inline `remediate COMMAND … --option` span exists on that
command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from remediate.cli import cli

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _examples(text: str, *, fenced: bool = False) -> list[str]:
    """Command lines: a line that is a `remediate …` command (a shell prompt `$ ` allowed), comment cut off;
    with ``fenced``, only lines inside ``` blocks (a page's prose may start a line with "remediate")."""
    found = []
    inside = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if fenced and not inside:
            continue
        command = line.strip().removeprefix("$ ").split("  #", 1)[0].strip()
        if command.startswith("remediate ") and "<" not in command and "…" not in command:
            found.append(command)
    return found


def _help_examples() -> list[str]:
    texts = [cli.help or ""] + [command.help or "" for command in cli.commands.values()]
    return [example for text in texts for example in _examples(text)]


def _page_examples() -> list[tuple[str, str]]:
    return [
        (page.relative_to(ROOT).as_posix(), ex) for page in PAGES for ex in _examples(page.read_text(), fenced=True)
    ]


def _spans() -> list[tuple[str, str]]:
    """Inline code spans that start with `remediate ` (prose such as `remediate oom HOST --probe TOKENS`)."""
    found = []
    for page in PAGES:
        for span in re.findall(r"`(remediate [^`\n]+)`", page.read_text()):
            found.append((page.relative_to(ROOT).as_posix(), span))
    return found


README = _examples((ROOT / "README.md").read_text(), fenced=True)
EXAMPLES = _page_examples()
SPANS = _spans()


def _option_names(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names


def test_the_readme_has_examples_for_every_command() -> None:
    used = {shlex.split(example)[1] for example in README}
    assert set(cli.commands) <= used, f"commands without a README example: {set(cli.commands) - used}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [rel for p in PAGES[1:] if f"({(rel := p.relative_to(ROOT).as_posix())})" not in readme]
    assert not missing, f"docs pages the README does not link: {missing}"


@pytest.mark.parametrize("example", README + _help_examples() + [ex for _, ex in EXAMPLES])
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


@pytest.mark.parametrize(("page", "span"), SPANS)
def test_options_named_in_prose_exist(page: str, span: str) -> None:
    words = span.split()
    name = words[1]
    if name.isupper():  # a placeholder: `remediate COMMAND --help`
        return
    command: click.Command | None = cli if name.startswith("-") else cli.commands.get(name)
    assert command is not None, f"{page}: `{span}` names no remediate command"
    options = _option_names(command)
    for word in words[1 if command is cli else 2 :]:
        if not re.match(r"^--?[a-zA-Z]", word):
            continue
        option = word.split("=", 1)[0].rstrip(",.;:)")
        assert option in options, f"{page}: `{span}`: {name} has no option {option}"


def test_the_prose_checks_see_the_spans() -> None:
    """The span collector finds the spans it should (else the checks above pass on nothing)."""
    pages = {page for page, _ in SPANS}
    assert "README.md" in pages and "docs/BENCH.md" in pages
    assert any("--probe" in span for _, span in SPANS)
