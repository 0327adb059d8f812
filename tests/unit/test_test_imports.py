"""No test module imports another test module: what tests share lives in tests/support/ (imported as
``tests.support…``, the one way), fixtures come through conftest.py (``pytest_plugins``), and bench/ takes its
drivers from tests/support/ or sandbox/ without putting tests/ on ``sys.path``.

An AST scan of tests/ and bench/: every import, at any depth (``TYPE_CHECKING`` blocks and functions included),
is resolved against the tree. A module under tests/ other than tests/support/ is a test module; so is any name
that only resolves because pytest put a test directory on ``sys.path`` (``unit.…``, ``e2e.…``,
``fake_transport``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ("tests", "support")


def _top_level_names(directory: Path) -> set[str]:
    return {p.stem if p.suffix == ".py" else p.name for p in directory.iterdir() if p.suffix == ".py" or p.is_dir()}


def _target(path: Path, node: ast.ImportFrom | ast.Import, name: str, root: Path) -> tuple[str, ...]:
    """The dotted module an import names, relative ones resolved against the file's folder."""
    if isinstance(node, ast.ImportFrom) and node.level:
        base = path.parent.relative_to(root).parts
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return (*base, *(node.module.split(".") if node.module else ()))
    return tuple(name.split("."))


def _pytest_path_names(root: Path) -> set[str]:
    """Top-level names that exist only because pytest puts a tests/ folder on ``sys.path`` (rootdir insertion):
    the names in tests/ and its package-less folders that the repository root does not also hold."""
    tests = root / "tests"
    names = _top_level_names(tests)
    for folder in tests.iterdir():
        if folder.is_dir() and not (folder / "__init__.py").exists() and folder.name != "support":
            names |= _top_level_names(folder)
    return names - _top_level_names(root) - {"tests", "__pycache__"}


def _is_sys_path(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys"


def _changes_sys_path(node: ast.AST) -> bool:
    """``sys.path.insert(…)``/``append``/``extend`` or an assignment to ``sys.path`` or a slice of it."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return _is_sys_path(node.func.value) and node.func.attr in ("insert", "append", "extend")
    if isinstance(node, ast.Assign):
        return any(_is_sys_path(getattr(t, "value", t)) for t in node.targets)
    return False


def violations(root: Path) -> list[str]:
    """``file:line: what`` for every import of a test module and every ``sys.path`` that gets tests/."""
    found: list[str] = []
    pytest_names = _pytest_path_names(root)
    files = sorted([*(root / "tests").rglob("*.py"), *(root / "bench").rglob("*.py")])
    for path in files:
        rel = path.relative_to(root)
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source, str(rel))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                relative = isinstance(node, ast.ImportFrom) and node.level > 0
                for name in names:
                    target = _target(path, node, name, root)
                    if target[:1] == ("tests",) and target[:2] != SUPPORT:
                        found.append(f"{rel}:{node.lineno}: imports the test module {'.'.join(target)}")
                    elif relative and target[:2] != SUPPORT:
                        found.append(f"{rel}:{node.lineno}: imports the test module {'.'.join(target)} (relative)")
                    elif not relative and target[0] in pytest_names:
                        found.append(f"{rel}:{node.lineno}: imports {name} through pytest's sys.path (tests/)")
                statement = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if rel.parts[0] == "tests" and rel.name.startswith("test_") and "noqa: F401" in statement:
                    found.append(f"{rel}:{node.lineno}: imports a fixture (conftest.py registers it)")
            elif _changes_sys_path(node):
                segment = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if '"tests"' in segment or "'tests'" in segment:
                    found.append(f"{rel}:{node.lineno}: puts tests/ on sys.path")
    return found


def test_no_test_module_imports_another() -> None:
    assert violations(ROOT) == []


def test_the_scan_finds_each_kind_of_test_import(tmp_path: Path) -> None:
    """The scan is not vacuous: a tree with one of each forbidden import yields one finding each."""
    (tmp_path / "sandbox").mkdir()
    (tmp_path / "bench").mkdir()
    support = tmp_path / "tests" / "support"
    support.mkdir(parents=True)
    (support / "hosts.py").write_text("from tests.support.fake_transport import FakeTransport\n")
    unit = tmp_path / "tests" / "unit"
    unit.mkdir()
    (unit / "__init__.py").write_text("")
    (tmp_path / "tests" / "fake_transport.py").write_text("")
    (unit / "test_a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from sandbox import Sandbox\n"  # the repository's sandbox package: allowed
        "from tests.support.hosts import oom_host\n"  # allowed
        "from unit.test_b import helper\n"  # via pytest's sys.path
        "from .test_b import other\n"  # relative
        "from fake_transport import FakeTransport\n"  # via pytest's sys.path
        "from tests.conftest import Hook\n"  # tests., not tests.support
        "from tests.support.clock import naps  # noqa: F401\n"  # a fixture imported
        "if TYPE_CHECKING:\n"
        "    from tests.unit.test_b import Thing\n"
    )
    (unit / "test_b.py").write_text("")
    (tmp_path / "bench" / "run.py").write_text(
        'import sys\nsys.path[:0] = [str(REPO), str(REPO / "tests")]\nsys.path.insert(0, str(REPO))\n'
    )
    found = violations(tmp_path)
    assert [f.split(": ", 1)[0] for f in found] == [
        "bench/run.py:2",
        "tests/unit/test_a.py:4",
        "tests/unit/test_a.py:5",
        "tests/unit/test_a.py:6",
        "tests/unit/test_a.py:7",
        "tests/unit/test_a.py:8",
        "tests/unit/test_a.py:10",
    ], found
