"""The engine seam is the only place that knows engines by name.

Outside ``core/engines/`` and the seam's per-engine implementations (modules named for their engine), no code
compares anything with an engine's name (``== "vllm"``, ``engine.name != "sglang"``, ``x.name == VLLM.name``
is still a comparison on ``.name``): it asks the engine (core/engines/base.py ``Engine``) or its side of a
feature's seam (host/bench/server.py, host/plan/planner.py). The names ``"vllm"`` and ``"sglang"`` may still
appear as data — a JSON value, a key, a text searched for — each such use listed in ``ALLOWED`` with its reason.
The check reads the AST: docstrings and comments are prose, not code.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
PACKAGE = ROOT / "src" / "remediate"
NAMES = frozenset({"vllm", "sglang"})

# The seam itself: the engines' descriptions, and each feature's per-engine implementations (named for it).
SEAM = ("core/engines/",)
IMPLEMENTATIONS = frozenset(
    {
        "host/bench/bench_sglang.py",
        "host/bench/bench_vllm.py",
        "host/plan/budget_vllm.py",
    }
)

# (module, name) → (how many times, why it is data and not a branch)
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("core/unitfile/command.py", "sglang"): (6, "the engines' entry points (_ENTRIES, keyed by name: the seam's "
                                              "second registry, named in core/engines/__init__.py) and the default "
                                              "engine of its readers' parameters"),
    ("core/unitfile/command.py", "vllm"): (2, "vLLM's entry point in _ENTRIES: its key and its program's name"),
    ("core/capacity/observation.py", "sglang"): (2, "the calibration record's engine when a record has none (records "
                                                   "written before vLLM); core/capacity may not import core/engines"),
    ("core/diagnosis/parser.py", "sglang"): (1, "a traceback frame's path searched for sglang's package"),
    ("core/bench/record.py", "sglang"): (1, "the bench record's `backend`, as sglang's bench_serving writes it"),
    ("cli/render/plan.py", "vllm"): (2, "the plan JSON's `vllm` section (its key) and the label of its line"),
}  # fmt: skip


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes (prose)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _is_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in NAMES


def _is_engine(node: ast.AST) -> bool:
    """One registered engine by its constant (``SGLANG``, ``VLLM``): ``engine is VLLM`` branches as a name does."""
    return isinstance(node, ast.Name) and node.id in {name.upper() for name in NAMES}


def _is_dot_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "name"


def branches(source: str) -> list[int]:
    """The lines that compare with an engine's name: a name literal (or an engine's constant, ``VLLM``) on either
    side of ``==``/``!=``/``is``/``in (…)``, or any comparison of an ``.name`` with a string or another ``.name``.
    The registry's ``DEFAULT`` is no engine's name: comparing with it is allowed."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, (left, right) in zip(node.ops, zip(operands, operands[1:], strict=False), strict=True):
            sides = (left, right)
            if isinstance(op, ast.In | ast.NotIn):  # `x in ("vllm", …)` branches; `"sglang" in text` searches
                members = right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else []
                if any(_is_name(m) or _is_engine(m) for m in members):
                    lines.append(node.lineno)
                continue
            if not isinstance(op, ast.Eq | ast.NotEq | ast.Is | ast.IsNot):
                continue
            dotted = any(_is_dot_name(s) for s in sides)
            stringy = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)
            if any(_is_name(s) or _is_engine(s) for s in sides) or (
                dotted and (stringy or all(_is_dot_name(s) for s in sides))
            ):
                lines.append(node.lineno)
    return lines


def name_literals(source: str) -> Counter[str]:
    """How many times each engine name is a string literal in code (docstrings aside)."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    return Counter(
        node.value
        for node in ast.walk(tree)
        if _is_name(node) and id(node) not in prose and isinstance(node, ast.Constant)
    )


def _modules() -> list[tuple[str, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(SEAM) or rel in IMPLEMENTATIONS:
            continue
        out.append((rel, path.read_text(encoding="utf-8")))
    return out


def test_no_module_outside_the_seam_compares_engine_names() -> None:
    found = [f"{rel}:{line}" for rel, text in _modules() for line in branches(text)]
    assert found == [], "ask the engine (core/engines/base.py) or its side of the feature's seam instead"


def test_the_check_reads_this_tree() -> None:
    assert len(_modules()) > 100  # the walk found the package (a wrong root would pass every check above)


def test_every_engine_name_literal_outside_the_seam_is_allowed_data() -> None:
    seen = {(rel, name): n for rel, text in _modules() for name, n in name_literals(text).items()}
    unexpected = {key: n for key, n in seen.items() if ALLOWED.get(key, (0, ""))[0] != n}
    stale = sorted(key for key in ALLOWED if key not in seen)
    assert unexpected == {}, "a new engine name in code: a branch goes behind the seam, data goes in ALLOWED"
    assert stale == [], "ALLOWED names a use that is gone: remove it"


def test_the_seam_s_modules_exist() -> None:
    for rel in IMPLEMENTATIONS:
        assert (PACKAGE / rel).is_file(), rel


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('if engine.name == "vllm":\n    pass\n', [1]),
        ('x = "sglang" != engine\n', [1]),
        ("same = a.name == VLLM.name\n", [1]),
        ('flag = "--max-model-len" if name in ("vllm", "x") else "--context-length"\n', [1]),
        ('ok = engine.name is not "sglang"\n', [1]),
        ('found = "sglang" in frame.text\n', []),
        ('key = doc.get("vllm")\n', []),
        ("same = engine is VLLM\n", [1]),
        ("if service.engine is not SGLANG:\n    pass\n", [1]),
        ("plain = engine is DEFAULT\n", []),
    ],
)
def test_branches_finds_a_comparison(source: str, expected: list[int]) -> None:
    assert branches(source) == expected


def test_name_literals_skip_docstrings() -> None:
    source = '"""About sglang."""\n\ndef f():\n    """vllm"""\n    return {"engine": "vllm"}\n'
    assert name_literals(source) == Counter({"vllm": 1})
