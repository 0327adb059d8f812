"""The README and docs/ hold together: every relative link (and its #anchor) resolves, and no page cites an
issue or pull-request number of this project (its tracker is not in the repository: a number there is a
dangling reference, and the page should say what it means instead)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```")
# "issue 26", "Issue #20", "issues 20 and 22", "issue26" (a file name), "#21", "(#34)", "PR 12"; not an upstream
# project's "sglang#23862" (written out as its URL anyway) nor a markdown heading or an anchor.
_ISSUE = re.compile(r"\b(?:issues?|PR|pull request)[\s_-]*#?\d+|(?<![\w/#&-])#\d+\b", re.IGNORECASE)


def _prose(text: str) -> str:
    """The page without its fenced blocks (a command's output may show anything)."""
    kept, inside = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            inside = not inside
            continue
        kept.append("" if inside else line)
    return "\n".join(kept)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in _prose(page.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            slug, n = _slug(match[1]), 1
            while slug in found:  # GitHub numbers repeated headings: x, x-1, x-2
                slug, n = f"{_slug(match[1])}-{n}", n + 1
            found.add(slug)
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file, or whose #anchor in a markdown file, does not exist."""
    broken = []
    for match in _LINK.finditer(_prose(page.read_text())):
        target = match[1] or match[2]
        if re.match(r"^[a-z][a-z+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.name})")
    return broken


def issue_references(text: str) -> list[str]:
    return [match[0] for match in _ISSUE.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert not broken_links(page), f"{page.relative_to(ROOT).as_posix()}: broken links {broken_links(page)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_cites_an_issue_number(page: Path) -> None:
    found = issue_references(page.read_text())
    assert not found, f"{page.relative_to(ROOT).as_posix()} cites issue numbers {found}: say what they stand for"


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    assert issue_references("see issue 26, third round; (issue #20) and #34; reference-issue26.json; PR 7") == [
        "issue 26",
        "issue #20",
        "#34",
        "issue26",
        "PR 7",
    ]
    assert issue_references("sglang#23862, ## Heading, [x](#the-watcher), `&#8203;`, 3 issues found") == []
    (tmp_path / "a.md").write_text("# Top\n## The `oom` step\n[ok](a.md#the-oom-step) [gone](b.md) [no](#nowhere)\n")
    assert broken_links(tmp_path / "a.md") == ["b.md (no such file)", "#nowhere (no heading #nowhere in a.md)"]


def test_the_readme_stays_a_first_read() -> None:
    """At most 200 lines: what it is, installing it, the two commands, a short tour, links; the rest is in docs/."""
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 200, f"README.md has {lines} lines (at most 200): move detail to a page in docs/"
