"""tests/unit/core/ mirrors src/remediate/core/: each folder of tests is a folder of the core, and each test
module in it tests that folder (imports one of its modules); a test of a top-level core module sits at the top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "src" / "remediate" / "core"
TESTS = ROOT / "tests" / "unit" / "core"
# Tests of a core folder that import none of its modules, and why.
READS_FILES = {"diagnosis/test_diagnosis_imports.py": "reads the package's source (its import graph), imports none"}


def _core_imports(path: Path) -> set[str]:
    """The remediate.core modules ``path`` imports, as paths relative to the core ("capacity/pool")."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            if name.startswith("remediate.core."):
                found.add(name.removeprefix("remediate.core.").replace(".", "/"))
    return found


def misplaced(tests: Path, core: Path) -> list[str]:
    """``test file: why`` for every test module of ``tests`` outside its core folder's mirror."""
    out = []
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests)
        imported = _core_imports(path)
        if str(path.relative_to(tests)) in READS_FILES:
            continue
        if folder != Path(".") and not (core / folder).is_dir():
            out.append(f"{path.relative_to(tests)}: no src/remediate/core/{folder}")
        elif folder != Path(".") and not any(Path(i).parent == folder or Path(i) == folder for i in imported):
            out.append(f"{path.relative_to(tests)}: imports nothing of core/{folder} ({sorted(imported)})")
        elif folder == Path(".") and not any("/" not in i and (core / f"{i}.py").is_file() for i in imported):
            out.append(f"{path.relative_to(tests)}: tests no top-level core module ({sorted(imported)})")
    return out


def test_tests_of_the_core_mirror_its_folders() -> None:
    assert misplaced(TESTS, CORE) == []


def test_a_misplaced_test_is_found(tmp_path: Path) -> None:
    core, tests = tmp_path / "core", tmp_path / "tests"
    (core / "watch").mkdir(parents=True)
    (core / "watch" / "detect.py").write_text("")
    (core / "numbers.py").write_text("")
    (tests / "watch").mkdir(parents=True)
    (tests / "gone").mkdir()
    (tests / "watch" / "test_ok.py").write_text("from remediate.core.watch.detect import x\n")
    (tests / "watch" / "test_elsewhere.py").write_text("from remediate.core.numbers import n\n")
    (tests / "gone" / "test_x.py").write_text("from remediate.core.watch import detect\n")
    (tests / "test_top.py").write_text("from remediate.core.numbers import n\n")
    (tests / "test_deep.py").write_text("from remediate.core.watch.detect import x\n")
    assert [line.split(":")[0] for line in misplaced(tests, core)] == [
        "gone/test_x.py",
        "test_deep.py",
        "watch/test_elsewhere.py",
    ]
