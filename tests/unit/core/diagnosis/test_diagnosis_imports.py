"""core/diagnosis is pure: no I/O, clock, environment, subprocess or upper-layer imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[4] / "src" / "remediate" / "core" / "diagnosis"
FORBIDDEN = {
    "os", "sys", "pathlib", "io", "subprocess", "socket", "shutil", "tempfile", "time", "datetime", "random",
    "logging", "click", "rich", "jinja2", "fabric", "paramiko", "invoke", "glob", "urllib", "http", "requests",
    "remediate.transport", "remediate.host", "remediate.fleet", "remediate.api", "remediate.cli",
}  # fmt: skip
ALLOWED_REMEDIATE = ("remediate.core", "remediate.errors", "remediate.models")
FILES = sorted(PACKAGE.rglob("*.py"))


def test_there_are_modules() -> None:
    assert len(FILES) >= 8


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
            if name.startswith("remediate"):
                assert name.startswith(ALLOWED_REMEDIATE), (path.name, name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"open", "exec", "eval", "__import__", "input", "print"}, (
                path.name,
                node.func.id,
            )
        if isinstance(node, ast.Attribute):
            assert node.attr not in {"read_text", "write_text", "read_bytes", "write_bytes", "environ"}, path.name
