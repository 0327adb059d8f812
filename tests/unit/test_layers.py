"""The import contract of the whole tree: packages are the layers and imports point only downward.

::

    faces       cli/ (click; render/ rich) · api/               may import every layer below
    fleet/      inventory, settings, rollout, request           not the faces
    host/       one host: a package per feature, common/ shared  not fleet/, not the faces
    transport/  base.py, ssh.py (the only fabric/paramiko)      core, errors, models only
    controller/ the controller's own files (state dir, logs)    core, errors, models only (transport's floor)
    core/       PURE: unitfile/, probe.py, backups.py           core, errors, models + pure stdlib only
    errors.py models.py                                         each other only

The checker reads the source (AST), so it sees function-level and ``TYPE_CHECKING`` imports too, and
it is tested on synthetic modules below: a contract that cannot fail proves nothing. No import cycle at
any level: between modules, and between the packages of each depth (the stand-ins too). One job per module,
with a hard limit of 600 lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "remediate"

RANK = {"base": 0, "core": 1, "transport": 2, "controller": 2, "host": 3, "fleet": 4, "face": 5}
FACES = {
    "remediate",
    "remediate.__main__",
    "remediate.api",
    "remediate.cli",
}
FACE_PACKAGES = ("remediate.api.", "remediate.cli.")  # the API and the CLI are packages of their own modules
RENDER_PACKAGE = "remediate.cli.render"  # every renderer: one module per feature, below the commands
RENDERERS = {
    RENDER_PACKAGE,
    f"{RENDER_PACKAGE}.console",
    f"{RENDER_PACKAGE}.results",
    f"{RENDER_PACKAGE}.diagnose",
    f"{RENDER_PACKAGE}.plan",
    f"{RENDER_PACKAGE}.bench",
}
CLI_MODULES = {
    "remediate.cli",
    "remediate.cli.app",
    "remediate.cli.options",
    "remediate.cli.edit",
    "remediate.cli.oom",
    "remediate.cli.rollback",
    "remediate.cli.status",
    "remediate.cli.diagnose",
    "remediate.cli.plan",
    "remediate.cli.bench",
    "remediate.cli.watch",
    "remediate.cli.flags",
    *RENDERERS,
}
BASE = {"remediate.errors", "remediate.models"}

# What may import which third-party library (module name → the only importers).
THIRD_PARTY_HOMES = {
    "click": CLI_MODULES,
    "rich": CLI_MODULES,
    "fabric": {"remediate.transport.ssh"},
    "paramiko": {"remediate.transport.ssh", "remediate.transport.ssh_errors", "remediate.transport.ssh_security"},
    "invoke": {"remediate.transport.ssh"},
    "jinja2": {"remediate.host.common.templates"},
    "prometheus_client": {"remediate.fleet.watch.metrics"},
}
# The concrete SSH transport is chosen once, by the API's default factory; everything else sees the Protocol.
SSH_IMPORTERS = {"remediate.api.hosts", "remediate.transport.ssh"}

# The pure core: stdlib modules that do no I/O, read no clock and no environment.
PURE_STDLIB = {
    "__future__", "abc", "base64", "bisect", "collections", "dataclasses", "datetime", "decimal", "difflib",
    "enum", "fnmatch", "functools", "hashlib", "itertools", "json", "math", "operator", "re", "shlex",
    "string", "textwrap", "typing",
}  # fmt: skip
IMPURE_CALLS = {"open", "exec", "eval", "__import__", "input", "print"}
IMPURE_ATTRIBUTES = {
    "now", "today", "utcnow", "read_text", "write_text", "read_bytes", "write_bytes", "environ", "getenv",
}  # fmt: skip


@dataclass(frozen=True)
class Import:
    name: str
    line: int


def layer_of(module: str) -> str:
    if module in BASE:
        return "base"
    if module in FACES or module.startswith(FACE_PACKAGES):
        return "face"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in {"core", "transport", "controller", "host", "fleet"}:
        return parts[1]
    raise AssertionError(
        f"{module}: not in any layer (errors/models, core/, transport/, controller/, host/, fleet/, faces)"
    )


def imports_of(module: str, tree: ast.AST, known: set[str], is_package: bool = False) -> list[Import]:
    """Every module ``module`` imports, anywhere in its body; ``from remediate import api`` is remediate.api
    (a name that is not a module, like a class, counts as its module)."""
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.append(Import(base, node.lineno))
            found += [Import(f"{base}.{a.name}", node.lineno) for a in node.names if f"{base}.{a.name}" in known]
    return found


def _may_import(importer: str, imported: str) -> bool:
    mine, theirs = layer_of(importer), layer_of(imported)
    if mine == "base":
        return theirs == "base"
    if mine in {"transport", "controller"}:  # one floor, two rooms: neither imports the other
        return theirs in {"base", "core", mine}
    if mine == "face":
        if importer in RENDERERS:  # renderers take values: other renderers and the layers below, not the api
            return imported in RENDERERS and imported != importer or layer_of(imported) != "face"
        if importer in CLI_MODULES and layer_of(imported) in {"transport", "host", "fleet"}:
            return False  # the commands reach the layers below through the api only
        if imported in CLI_MODULES:
            return importer == "remediate.__main__" or importer in CLI_MODULES
        if importer.startswith("remediate.api"):
            return imported.startswith("remediate.api") and imported != importer or layer_of(imported) != "face"
        return imported != importer
    return RANK[theirs] <= RANK[mine]


def violations(module: str, source: str, known: set[str], is_package: bool = False) -> list[str]:
    """What ``module`` (its ``source``) does against the contract, one line each; ``known`` = all remediate modules."""
    tree = ast.parse(source)
    layer = layer_of(module)
    found: list[str] = []
    for imp in imports_of(module, tree, known, is_package):
        top = imp.name.split(".")[0]
        where = f"{module}:{imp.line} imports {imp.name}"
        if top == "remediate":
            target = imp.name
            if target not in known:
                found.append(f"{where}: no such remediate module")
            elif target != module and not _may_import(module, target):
                found.append(f"{where}: {layer} must not import {layer_of(target)} ({target})")
            elif target == "remediate.transport.ssh" and module not in SSH_IMPORTERS:
                found.append(f"{where}: only the API's default factory picks the SSH transport")
            continue
        homes = THIRD_PARTY_HOMES.get(top)
        if homes is not None and module not in homes:
            found.append(f"{where}: {top} belongs in {', '.join(sorted(homes))} only")
        if layer in {"core", "base"} and top not in PURE_STDLIB:
            found.append(f"{where}: the {layer} layer is pure (allowed: {', '.join(sorted(PURE_STDLIB))})")
    if layer in {"core", "base"}:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IMPURE_CALLS:
                found.append(f"{module}:{node.lineno} calls {node.func.id}(): the {layer} layer does no I/O")
            if isinstance(node, ast.Attribute) and node.attr in IMPURE_ATTRIBUTES:
                found.append(f"{module}:{node.lineno} uses .{node.attr}: no clock, files or environment in {layer}")
    return found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


# -- the tree -------------------------------------------------------------------------------------


def test_the_tree_has_its_layers() -> None:
    layers = {layer_of(m) for m in MODULES}
    assert layers == set(RANK)
    assert {"remediate.core.unitfile.edit", "remediate.core.probe", "remediate.core.backups"} <= set(MODULES)
    assert {"remediate.host.oom.runner", "remediate.host.common.transaction", "remediate.fleet.rollout"} <= set(MODULES)
    assert {"remediate.controller.state", "remediate.controller.transactions"} <= set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_keeps_the_contract(module: str) -> None:
    path = MODULES[module]
    assert violations(module, path.read_text(), set(MODULES), path.name == "__init__.py") == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_has_one_job_within_the_hard_limit(module: str) -> None:
    """One job per module, by review; 600 lines is the hard limit that says a module grew a second job."""
    lines = MODULES[module].read_text().count("\n")
    assert lines <= MAX_LINES, f"{module}: {lines} lines; it does more than one job: split it by job"


# -- no import cycle at any level ----------------------------------------------------------------

MAX_LINES = 600

KNOWN_CYCLES: set[frozenset[str]] = set()  # none: the watcher's parts see it through fleet/watch/host.py


def import_graph(modules: dict[str, Path], top: set[str]) -> dict[str, set[str]]:
    """module → the modules of ``modules`` it imports, anywhere in its body (TYPE_CHECKING and function-level
    imports included); only names whose first part is in ``top`` count."""
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        found = {i.name for i in imports_of(name, tree, known, path.name == "__init__.py")}
        # ``from package import submodule`` imports the submodule, not the package's own names: its
        # __init__ runs first whatever is imported below it, which is never a cycle of its own.
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.names:
                base = next(i for i in imports_of(name, ast.Module([node], []), known, path.name == "__init__.py"))
                if all(f"{base.name}.{a.name}" in known for a in node.names):
                    found.discard(base.name)
        graph[name] = {i for i in found if i.split(".")[0] in top and i in known and i != name}
    return graph


def collapsed(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """The graph of the tree's nodes ``depth`` parts deep (a package stands for everything under it; a module
    shallower than that stands for itself): an edge where something under one imports something under another."""

    def node(module: str) -> str:
        return ".".join(module.split(".")[:depth])

    out: dict[str, set[str]] = {}
    for importer, imported in graph.items():
        out.setdefault(node(importer), set()).update(node(m) for m in imported if node(m) != node(importer))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted: every import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycles_at_every_level(graph: dict[str, set[str]], known: set[frozenset[str]] = frozenset()) -> list[str]:
    """Every cycle, module-level and package-level at each depth, one line each; a ``known`` pair's edges
    are left out (both directions)."""
    graph = {m: {i for i in imported if frozenset({m, i}) not in known} for m, imported in graph.items()}
    deepest = max(len(m.split(".")) for m in graph)
    found: list[str] = []
    for depth in range(1, deepest + 1):
        level = "modules" if depth == deepest else f"level {depth}"
        found += [f"{level}: {' <-> '.join(c)}" for c in cycles(collapsed(graph, depth))]
    return sorted(set(found))


STANDIN = SRC.parent / "sandbox" / "standin"


def _standin_modules() -> dict[str, Path]:
    found = {}
    for path in sorted(STANDIN.rglob("*.py")):
        parts = list(path.relative_to(STANDIN).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def test_no_import_cycle_at_any_level_in_the_package() -> None:
    graph = import_graph(MODULES, {"remediate"})
    assert cycles_at_every_level(graph, KNOWN_CYCLES) == []


def test_each_known_cycle_is_still_one() -> None:
    """A known cycle that is gone leaves its exception behind: delete it from KNOWN_CYCLES."""
    graph = import_graph(MODULES, {"remediate"})
    for pair in KNOWN_CYCLES:
        a, b = sorted(pair)
        assert b in graph[a] and a in graph[b], f"{a} <-> {b} is no longer a cycle: remove it from KNOWN_CYCLES"


def test_no_import_cycle_at_any_level_in_the_stand_ins() -> None:
    modules = _standin_modules()
    assert cycles_at_every_level(import_graph(modules, {"sglang", "vllm"})) == []


def test_the_cycle_checker_finds_module_package_and_type_checking_cycles(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/x.py": "from pkg.b import y\n",
        "pkg/a/w.py": "",
        "pkg/b/__init__.py": "",
        "pkg/b/y.py": "",
        "pkg/b/z.py": "from pkg.a import w\n",  # a → b and b → a: a package-level cycle, no module-level one
        "pkg/c/__init__.py": "",
        "pkg/c/p.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c.q import Q\n",
        "pkg/c/q.py": "def f():\n    from pkg.c import p\n",  # a TYPE_CHECKING and a function-level import
    }
    modules = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        name = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        modules[name] = path
    graph = import_graph(modules, {"pkg"})
    assert cycles_at_every_level(graph) == ["level 2: pkg.a <-> pkg.b", "modules: pkg.c.p <-> pkg.c.q"]
    assert cycles_at_every_level(graph, {frozenset({"pkg.c.p", "pkg.c.q"})}) == ["level 2: pkg.a <-> pkg.b"]


def test_no_test_double_in_the_package() -> None:
    assert not [m for m in MODULES if "fake" in m or "test" in m]


# -- the checker itself ---------------------------------------------------------------------------

KNOWN = set(MODULES)


@pytest.mark.parametrize(
    "source",
    [
        "from remediate.host.oom import runner",
        "from remediate.host.common.health import wait_healthy",
        "import remediate.fleet.rollout",
        "from remediate.transport.base import Transport",
        "from remediate import api",
        "import paramiko",
        "from fabric import Connection",
        "import click",
        "from rich.console import Console",
        "import jinja2",
        "import subprocess",
        "import socket",
        "import os",
        "import time",
        "from pathlib import Path",
        "def f():\n    import subprocess\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from remediate.host.common.options import RunOptions",
        "from datetime import datetime\nSTAMP = datetime.now()\n",
        "def f(p):\n    return open(p).read()\n",
        "def f(p):\n    return p.read_text()\n",
    ],
)
def test_checker_catches_a_core_module_that_reaches_out(source: str) -> None:
    assert violations("remediate.core.probe", source, KNOWN), source


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("remediate.host.oom.runner", "from remediate.fleet.settings import run_options_for"),
        ("remediate.host.oom.runner", "from remediate import api"),
        ("remediate.host.oom.runner", "from remediate.transport.ssh import SSHTransport"),
        ("remediate.host.oom.runner", "import click"),
        ("remediate.fleet.rollout", "from remediate.cli import cli"),
        ("remediate.fleet.rollout", "from remediate.api import status"),
        ("remediate.transport.base", "from remediate.host.common.probe import probe"),
        ("remediate.transport.ssh", "from ..host.oom import runner"),
        ("remediate.controller.state", "from remediate.host.oom.runner import remediate_host"),
        ("remediate.controller.retry", "from remediate.fleet.inventory import Inventory"),
        ("remediate.controller.state", "from remediate.transport.base import Transport"),
        ("remediate.controller.state", "from remediate import api"),
        ("remediate.controller.state", "import paramiko"),
        ("remediate.transport.base", "from remediate.controller.state import state_dir"),
        ("remediate.core.probe", "from remediate.controller.state import state_dir"),
        ("remediate.models", "from remediate.core.unitfile.edit import DesiredState"),
        ("remediate.models", "from remediate.transport.base import SSHOptions"),
        ("remediate.errors", "import os"),
        ("remediate.api", "import paramiko"),
        ("remediate.api", "import click"),
        ("remediate.cli.render.results", "from remediate import api"),
        ("remediate.cli.plan", "from remediate.host.plan import budget"),
        ("remediate.cli.bench", "from remediate.fleet.bench import bench_hosts"),
        ("remediate.cli.options", "from remediate.transport.base import SSHOptions"),
        ("remediate.cli.render.results", "from remediate.cli.options import fail"),
        ("remediate.api.status_cmd", "from remediate.cli.render.console import dumps"),
        ("remediate.fleet.rollout", "from rich.console import Console"),
        ("remediate.host.common.health", "import jinja2"),
        ("remediate.host.oom.runner", "from remediate.host.nonexistent import thing"),
    ],
)
def test_checker_catches_an_upward_or_misplaced_import(module: str, source: str) -> None:
    assert violations(module, source, KNOWN), (module, source)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("remediate.core.probe", "import re\nfrom remediate.core.unitfile.edit import UnitSources"),
        (
            "remediate.core.probe",
            "from datetime import UTC, datetime\ndef f(now: datetime) -> datetime:\n    return now",
        ),
        ("remediate.core.unitfile.edit", "from . import model\nfrom .model import parse_unit"),
        ("remediate.host.oom.runner", "from remediate.core.probe import ProbeResult\nimport time"),
        ("remediate.fleet.settings", "from remediate.host.common.options import RunOptions"),
        ("remediate.controller.retry", "import os\nfrom remediate.controller.state import state_dir"),
        ("remediate.controller.observations", "from remediate.core.capacity.observation import Observation"),
        ("remediate.host.common.transaction", "from remediate.controller.transactions import record_transaction"),
        ("remediate.fleet.retry", "from remediate.controller.retry import write_retry_text"),
        ("remediate.api.oom", "from remediate.controller.state import check_state_dir"),
        ("remediate.api.hosts", "from remediate.transport.ssh import SSHTransport"),
        ("remediate.cli", "import click\nfrom remediate import api"),
        ("remediate.cli.plan", "from remediate.cli.render import plan\nfrom remediate.cli.render.bench import dumps"),
        ("remediate.cli.render.results", "from remediate.cli.render.plan import plan_table\nimport rich"),
        ("remediate.errors", "from remediate.models import CommandResult"),
    ],
)
def test_checker_allows_what_the_contract_allows(module: str, source: str) -> None:
    assert violations(module, source, KNOWN, module.endswith("__init__")) == []


def test_relative_imports_are_resolved() -> None:
    errors = violations("remediate.core.probe", "from ..host.oom import runner", KNOWN)
    assert any("imports remediate.host.oom.runner: core must not import host" in e for e in errors), errors
