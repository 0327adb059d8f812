"""docs/internals/ARCHITECTURE.md's module list and src/remediate/ agree, in both directions.

The list is the fenced block of ARCHITECTURE.md whose first line is ``src/remediate/``. One entry per
line, first on its line, indented under its folder; ``name/`` is a package (it stands for its
``__init__.py``, and for a folder of modules without one); every other word on a line is description, and
a line whose first word is not ``x.py`` or ``x/`` continues the description above it. The source side:
every ``.py`` under src/remediate/ (``__pycache__`` aside) is ``path/to/module.py``; every folder that
holds one is ``path/to/folder/``; the package's own ``__init__.py`` is the block's first line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
DOC = ROOT / "docs" / "internals" / "ARCHITECTURE.md"
PACKAGE = ROOT / "src" / "remediate"
TOP = "src/remediate/"

_ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[A-Za-z_]\w*(?:\.py|/))(?=\s|$)")


class DocListError(ValueError):
    """The module list cannot be read: no block, or a name listed twice."""


def doc_modules(text: str) -> dict[str, int]:
    """The module list's entries as paths relative to src/remediate/, each with its line number in ``text``."""
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.strip().startswith("```") and i + 1 < len(lines) and lines[i + 1].strip() == TOP:
            start = i + 2
            break
    if start is None:
        raise DocListError(f"no fenced block starting with {TOP!r}")
    found: dict[str, int] = {}
    stack: list[tuple[int, str]] = [(-1, "")]  # (indent, folder path) of the folders open above this line
    for number, line in enumerate(lines[start:], start=start + 1):
        if line.strip().startswith("```"):
            return found
        match = _ENTRY.match(line)
        if not match:
            continue  # a description's continuation, or a blank line
        indent, name = len(match["indent"]), match["name"]
        while stack[-1][0] >= indent:
            stack.pop()
        path = stack[-1][1] + name
        if path in found:
            raise DocListError(f"{path} is listed twice (lines {found[path]} and {number})")
        found[path] = number
        if name.endswith("/"):
            stack.append((indent, path))
    raise DocListError(f"the {TOP!r} block is not closed")


def source_modules(package: Path) -> set[str]:
    """Every module and package folder under ``package``, as the list names them."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts:
            continue
        if rel.name != "__init__.py":
            names.add(rel.as_posix())
        names.update(f"{parent.as_posix()}/" for parent in rel.parents if parent != Path("."))
    return names


def disagreement(listed: dict[str, int], present: set[str]) -> str:
    """What to change in the list, by name: empty when it agrees with the tree."""
    missing = sorted(present - set(listed))
    extra = sorted(set(listed) - present)
    parts = []
    if missing:
        parts.append("not in docs/internals/ARCHITECTURE.md's module list (add a line each): " + ", ".join(missing))
    if extra:
        where = ", ".join(f"{name} (line {listed[name]})" for name in extra)
        parts.append(f"named in docs/internals/ARCHITECTURE.md but not in src/remediate/ (rename or remove): {where}")
    return "\n".join(parts)


SAMPLE = """\
# Title

```text
not the list/
```

```text
src/remediate/
  cli/                faces
    app.py            the group; it continues
                      on this line, and this one names options.py in passing
    render/           renderers
      bench.py        the table
  core/               pure
    unitfile/         the model
      edit.py         the planner
    probes.py         parsers
  errors.py           the tree
```
"""


def test_the_parser_nests_entries_under_their_folders_and_skips_descriptions() -> None:
    assert doc_modules(SAMPLE) == {
        "cli/": 9,
        "cli/app.py": 10,
        "cli/render/": 12,
        "cli/render/bench.py": 13,
        "core/": 14,
        "core/unitfile/": 15,
        "core/unitfile/edit.py": 16,
        "core/probes.py": 17,
        "errors.py": 18,
    }


def test_the_parser_refuses_a_doc_without_the_block_or_with_a_name_twice() -> None:
    with pytest.raises(DocListError, match="no fenced block"):
        doc_modules("# nothing here\n```\nsrc/\n```\n")
    with pytest.raises(DocListError, match=r"cli/app\.py is listed twice \(lines 4 and 5\)"):
        doc_modules("```\nsrc/remediate/\n  cli/\n    app.py\n    app.py\n```\n")
    with pytest.raises(DocListError, match="not closed"):
        doc_modules("```\nsrc/remediate/\n  errors.py\n")


def test_the_source_side_names_modules_and_folders_and_folds_init_into_its_folder(tmp_path: Path) -> None:
    for name in ("__init__.py", "errors.py", "cli/__init__.py", "cli/app.py", "core/unitfile/edit.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "cli" / "__pycache__").mkdir()
    (tmp_path / "cli" / "__pycache__" / "app.cpython-311.py").write_text("")
    assert source_modules(tmp_path) == {
        "errors.py",
        "cli/",
        "cli/app.py",
        "core/",
        "core/unitfile/",
        "core/unitfile/edit.py",
    }


def test_a_disagreement_names_each_missing_and_extra_module() -> None:
    listed = {"cli/": 3, "cli/app.py": 4, "render.py": 9}
    present = {"cli/", "cli/app.py", "cli/render/", "cli/render/results.py"}
    assert disagreement(listed, present) == (
        "not in docs/internals/ARCHITECTURE.md's module list (add a line each): cli/render/, cli/render/results.py\n"
        "named in docs/internals/ARCHITECTURE.md but not in src/remediate/ (rename or remove): render.py (line 9)"
    )
    assert disagreement({"cli/": 1}, {"cli/"}) == ""


# The module list in docs/internals/ARCHITECTURE.md and the source tree name the same modules, both ways.
def test_the_module_list_matches_the_source_tree() -> None:
    problem = disagreement(doc_modules(DOC.read_text()), source_modules(PACKAGE))
    assert not problem, problem
