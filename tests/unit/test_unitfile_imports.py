"""The unit-file core is pure: nothing under src/remediate/core/unitfile imports I/O or opens files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

UNITFILE = Path(__file__).resolve().parents[2] / "src" / "remediate" / "core" / "unitfile"
FORBIDDEN = {
    "os", "pathlib", "io", "subprocess", "socket", "shutil", "tempfile", "click", "fabric",
    "paramiko", "invoke", "remediate.transport", "glob", "urllib", "http", "requests",
}  # fmt: skip
FILES = sorted(UNITFILE.rglob("*.py"))


def test_there_are_modules() -> None:
    assert len(FILES) >= 7


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_module_does_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        for name in names:
            assert not any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN), (path.name, name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"open", "exec", "eval", "__import__"}, (path.name, node.func.id)
        if isinstance(node, ast.Attribute):
            assert node.attr not in {"read_text", "write_text", "read_bytes", "write_bytes"}, path.name
