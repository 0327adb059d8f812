"""Start-up stays lazy: importing the CLI (all that `--help` and `--version` need) pulls in none of the heavy
layers below it. A behaviour check on ``sys.modules`` in a fresh interpreter, not a timing assert."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

INCIDENT = Path(__file__).resolve().parents[3] / "examples" / "incident" / "sglang.service"
HEAVY = ("paramiko", "fabric", "invoke", "rich", "jinja2", "yaml", "remediate.api", "remediate.transport")


def _modules_after(code: str) -> set[str]:
    run = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        # A REMEDIATE_* variable makes the CLI check it (cli/flags.py: safety options are refused
        # from the environment); the test session sets REMEDIATE_STATE_DIR.
        env={k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")},
    )
    return set(json.loads(run.stdout.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_importing_the_cli_imports_no_heavy_layer() -> None:
    modules = _modules_after("import remediate.cli")
    assert "click" in modules  # the command definitions are really there
    assert _heavy(modules) == []


def test_help_and_version_import_no_heavy_layer() -> None:
    for argv in (["--help"], ["--version"], ["oom", "--help"]):
        code = (
            "import sys\nfrom remediate.cli import cli\n"
            f"try:\n    cli({argv!r}, prog_name='remediate')\nexcept SystemExit:\n    pass"
        )
        assert _heavy(_modules_after(code)) == [], argv


def test_a_command_still_reaches_the_layers_it_needs() -> None:
    # The lazy modules load on first use: `edit` of a unit file goes through api and render.
    code = (
        "import sys\nfrom remediate.cli import cli\n"
        f"try:\n    cli(['edit', {str(INCIDENT)!r}, '--json'], prog_name='remediate')\n"
        "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code"
    )
    modules = _modules_after(code)
    assert "remediate.api" in modules
    assert "remediate.cli.render.results" in modules


def test_bench_help_shows_the_sweep_defaults_it_reads_on_first_use() -> None:
    """`bench`'s defaults come from the core when used; the help states them without importing it."""
    from click.testing import CliRunner

    from remediate.cli import cli
    from remediate.core.bench.sweep import DEFAULT_CONTEXTS, DEFAULT_GEN

    shown = " ".join(CliRunner().invoke(cli, ["bench", "--help"]).output.split())
    assert f"[default: ({DEFAULT_CONTEXTS})]" in shown and f"[default: ({DEFAULT_GEN}); x>=1]" in shown


def test_the_api_package_loads_a_function_s_modules_on_first_use() -> None:
    """`remediate oom` loads the change path only: not bench's, plan's or diagnose's modules."""
    modules = _modules_after("from remediate import api\napi.remediate_oom")
    assert "remediate.api.oom" in modules
    assert (
        not {
            "remediate.api.status_cmd",
            "remediate.api.plan_cmd",
            "remediate.api.diagnose_cmd",
            "remediate.api.bench_cmd",
            "remediate.host.bench.bench",
            "remediate.host.plan.plan",
            "remediate.host.diagnose.diagnose",
        }
        & modules
    )
    assert "remediate.host.oom.runner" not in modules  # the job's: it loads while the first handshakes are under way


def test_every_api_name_resolves_and_is_listed() -> None:
    from remediate import api

    assert sorted(api.__all__) == sorted(api._HOMES)
    for name in api.__all__:
        assert getattr(api, name) is getattr(importlib.import_module(f"remediate.api.{api._HOMES[name]}"), name)
    assert set(api.__all__) <= set(dir(api))
    with pytest.raises(AttributeError, match="no_such"):
        api.no_such  # noqa: B018


def test_the_entry_point_freezes_what_the_run_loaded_before_the_interpreter_exits() -> None:
    """Exit skips a last cycle collection of every module's objects (gc.freeze, cli/app.py main), after the
    command ran: its exit code and output are the command's own."""
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: sys.stderr.write(f'frozen={gc.get_freeze_count()}'))\n"
        "sys.argv = ['remediate', '--version']\n"
        "from remediate.cli import main\n"
        "main()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0 and "remediate" in run.stdout
    assert int(run.stderr.split("frozen=")[1]) > 0
