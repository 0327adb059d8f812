"""One validation of every option for all three faces (issue 31): each bad value is refused by the command line
(exit 2, one line), by the Python API (ConfigError) and by the Ansible module (the task failed) with the same
text, from core/bounds.py, before any host is contacted or any file written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediate import api
from remediate.api.watch import WatchRequest
from remediate.core.bounds import BOUNDS, check_option
from remediate.errors import ConfigError
from remediate.fleet.request import OomRequest
from remediate.host.common.options import RunOptions
from remediate.transport.base import SSHOptions

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def _never(entry: Any, options: Any) -> Any:
    raise AssertionError(f"a host was contacted: {entry}")


# (command line, API call, Ansible module and its arguments, the one line every face says)
CASES: list[tuple[list[str], Callable[[], object], tuple[str, dict[str, Any]], str]] = [
    (
        ["oom", "gpu-01", "--wait-timeout", "0"],
        lambda: api.remediate_oom(OomRequest(targets=("gpu-01",), timeout=0), transport_factory=_never),
        ("oom", {"wait_timeout": 0}),
        "--wait-timeout must be at least 1 (seconds), got 0",
    ),
    (
        ["rollback", "gpu-01", "--wait-timeout", "0.5"],
        lambda: api.rollback(api.RollbackRequest(targets=("gpu-01",), timeout=0.5), transport_factory=_never),
        ("rollback", {"wait_timeout": 0.5}),
        "--wait-timeout must be at least 1 (seconds), got 0.5",
    ),
    (
        ["rollback", "gpu-01", "--lock-timeout", "0"],
        lambda: api.rollback(api.RollbackRequest(targets=("gpu-01",), lock_timeout=0), transport_factory=_never),
        ("rollback", {"lock_timeout": 0}),
        "--lock-timeout must be at least 1 (seconds), got 0",
    ),
    (
        ["oom", "gpu-01", "--lock-timeout", "-3"],
        lambda: OomRequest(targets=("gpu-01",), lock_timeout=-3),
        ("oom", {"lock_timeout": -3}),
        "--lock-timeout must be at least 1 (seconds), got -3",
    ),
    (
        ["diagnose", "gpu-01", "--smi-timeout", "-5"],
        lambda: api.diagnose(api.DiagnoseRequest(targets=("gpu-01",), smi_timeout=-5), transport_factory=_never),
        ("diagnose", {"smi_timeout": -5}),
        "--smi-timeout must be from 1 to 30 (seconds), got -5",
    ),
    (
        ["oom", "gpu-01", "--smi-timeout", "31"],
        lambda: OomRequest(targets=("gpu-01",), smi_timeout=31),
        ("oom", {"smi_timeout": 31}),
        "--smi-timeout must be from 1 to 30 (seconds), got 31",
    ),
    (
        ["oom", "gpu-01", "--probe", "0"],
        lambda: OomRequest(targets=("gpu-01",), probe_tokens=0),
        ("oom", {"probe": 0}),
        "--probe must be at least 1 (tokens), got 0",
    ),
    (
        ["oom", "gpu-01", "--min-tokens", "-1"],
        lambda: OomRequest(targets=("gpu-01",), min_tokens=-1),
        ("oom", {"min_tokens": -1}),
        "--min-tokens must be at least 1 (tokens), got -1",
    ),
    (
        ["oom", "gpu-01", "--target-tokens", "0"],
        lambda: OomRequest(targets=("gpu-01",), target_tokens=0),
        ("oom", {"target_tokens": 0}),
        "--target-tokens must be at least 1 (tokens), got 0",
    ),
    (
        ["diagnose", "gpu-01", "--lines", "0"],
        lambda: api.diagnose(api.DiagnoseRequest(targets=("gpu-01",), lines=0), transport_factory=_never),
        ("diagnose", {"lines": 0}),
        "--lines must be at least 1 (lines), got 0",
    ),
]
IDS = [f"{c[2][0]}-{next(iter(c[2][1]))}={next(iter(c[2][1].values()))}" for c in CASES]


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A state directory that must not even be created: nothing is written for bad input."""
    path = tmp_path / "state"
    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(path))
    yield path
    assert not path.exists()


@pytest.mark.parametrize(("argv", "call", "module", "line"), CASES, ids=IDS)
def test_the_cli_refuses_each_bad_value_in_one_line_with_exit_2(
    argv: list[str], call: Callable[[], object], module: tuple[str, dict[str, Any]], line: str, state: Path
) -> None:
    ran = subprocess.run(
        [str(BIN / "remediate"), *argv], capture_output=True, text=True, timeout=60, check=False, env=dict(os.environ)
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (2, "", f"remediate: {line}\n")


@pytest.mark.parametrize(("argv", "call", "module", "line"), CASES, ids=IDS)
def test_the_api_raises_config_error_with_the_same_line_before_any_host(
    argv: list[str], call: Callable[[], object], module: tuple[str, dict[str, Any]], line: str, state: Path
) -> None:
    with pytest.raises(ConfigError) as caught:
        call()
    assert str(caught.value) == line


def test_the_ansible_modules_fail_each_task_with_the_same_line(tmp_path: Path) -> None:
    """Every case as one task of one playbook on localhost (the library imported by this venv's python): each
    task failed with the CLI's line, and the state directory never created (nothing read, nothing written)."""
    collections = tmp_path / "collections"
    (collections / "ansible_collections" / "remediate").mkdir(parents=True)
    (collections / "ansible_collections" / "remediate" / "serving").symlink_to(ROOT / "ansible")
    tasks: list[dict[str, Any]] = [
        {f"remediate.serving.{name}": args, "ignore_errors": True, "register": f"r{i}"}
        for i, (_, _, (name, args), _) in enumerate(CASES)
    ]
    each = ", ".join(f"r{i}" for i in range(len(CASES)))
    out = tmp_path / "results.json"
    tasks.append({"ansible.builtin.copy": {"content": f"{{{{ [{each}] | to_json }}}}", "dest": str(out)}})
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp_path / "home"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "REMEDIATE_STATE_DIR": str(tmp_path / "state"),
    }
    argv = [str(BIN / "ansible-playbook"), "play.yml", "-e", f"ansible_python_interpreter={sys.executable}"]
    ran = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    results = json.loads(out.read_text())
    assert [(r.get("failed"), r.get("msg")) for r in results] == [(True, line) for *_, line in CASES], ran.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        ("lock_timeout", 2.5, "--lock-timeout must be a whole number of seconds, got 2.5"),
        ("lock_timeout", True, "--lock-timeout must be a whole number of seconds, got True"),
        ("wait_timeout", float("inf"), "--wait-timeout must be a number of seconds, got inf"),
        ("wait_timeout", float("nan"), "--wait-timeout must be a number of seconds, got nan"),
        ("wait_timeout", "30", "--wait-timeout must be a number of seconds, got 30"),  # the API takes numbers
        ("smi_timeout", None, "--smi-timeout must be a whole number of seconds, got None"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(name: str, value: object, line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_option(name, value)
    assert str(caught.value) == line


def test_good_values_come_back_typed_and_the_text_form_is_the_command_lines() -> None:
    assert check_option("lock_timeout", 30.0) == 30 and isinstance(check_option("lock_timeout", 30.0), int)
    assert check_option("wait_timeout", "2.5", text=True) == 2.5
    assert check_option("smi_timeout", "30", text=True) == 30
    assert set(BOUNDS) >= {"wait_timeout", "lock_timeout", "smi_timeout", "probe", "connect_timeout", "forks"}


def test_the_library_checks_whoever_builds_the_options_directly() -> None:
    with pytest.raises(ConfigError, match=r"^--wait-timeout must be at least 1 \(seconds\), got 0$"):
        RunOptions(timeout=0)
    with pytest.raises(ConfigError, match=r"^--smi-timeout must be from 1 to 30 \(seconds\), got 0$"):
        RunOptions(smi_timeout=0)
    with pytest.raises(ConfigError, match=r"^--connect-timeout must be at least 1 \(seconds\), got 0$"):
        SSHOptions(connect_timeout=0)
    with pytest.raises(ConfigError, match=r"^--wait-timeout must be at least 1 \(seconds\), got 0$"):
        WatchRequest(targets=("gpu-01",), wait_timeout=0)
    with pytest.raises(ConfigError, match=r"^--forks must be at least 1 \(hosts\), got 0$"):
        api.status(api.StatusRequest(targets=("gpu-01",), forks=0), transport_factory=_never)
