"""The budget model predicts the stand-in's pool from the stand-in's own startup lines (within 0.5%)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

from remediate.core.capacity.pool import BudgetModel, Measured, calibrate, model_from_server
from remediate.core.startup import parse_startup

STANDIN = Path(__file__).resolve().parents[2] / "sandbox" / "standin"


def _memory_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("standin_memory", STANDIN / "sglang" / "memory.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _startup_lines(tmp_path: Path, fraction: str, version: str = "0.5.6") -> list[str]:
    """Start the stand-in, read its stderr up to the capacity line (or its exit), stop it by PID."""
    knobs = tmp_path / f"knobs-{version}.json"
    knobs.write_text(json.dumps({"time_scale": 0.0005, "api_version": version}))
    env = dict(os.environ, PYTHONPATH=str(STANDIN), SGLANG_STANDIN_CONFIG=str(knobs))
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.6", "--tp", "8"]
    argv += ["--mem-fraction-static", fraction, "--host", "127.0.0.1", "--port", str(_free_port())]
    lines: list[str] = []
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line.rstrip("\n"))
                if "max_total_num_tokens=" in line or "Not enough memory" in line:
                    break
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return lines


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[str]]]:
    tmp = tmp_path_factory.mktemp("standin-budget")
    fractions = ("0.79", "0.92", "0.93", "0.94")
    with ThreadPoolExecutor(max_workers=len(fractions)) as pool:  # four stand-ins, each on its own port
        lines = dict(zip(fractions, pool.map(lambda f: _startup_lines(tmp, f), fractions), strict=True))
    yield lines


def _reported(lines: list[str]) -> int | None:
    return parse_startup(lines).max_total_num_tokens


def test_the_model_from_the_093_start_predicts_092_and_094(started: dict[str, list[str]]) -> None:
    built = model_from_server(parse_startup(started["0.93"]))
    assert isinstance(built, BudgetModel)
    for fraction in ("0.92", "0.93", "0.94"):
        reported = _reported(started[fraction])
        assert reported is not None
        assert built.predict(float(fraction)).tokens == pytest.approx(reported, rel=0.005)
    assert _reported(started["0.94"]) == 209007 and _reported(started["0.93"]) == 195011


def test_unanchored_and_calibrated(started: dict[str, list[str]]) -> None:
    raw = model_from_server(parse_startup(started["0.94"]), anchor=False)
    assert isinstance(raw, BudgetModel)
    for fraction in ("0.92", "0.93", "0.94"):
        assert raw.predict(float(fraction)).tokens == pytest.approx(_reported(started[fraction]), rel=0.005)
    fitted, errors = calibrate(raw, [Measured(0.93, 195011), Measured(0.94, 209007)])
    assert all(abs(e.relative) < 0.005 for e in errors)
    assert fitted.predict(0.92).tokens == pytest.approx(_reported(started["0.92"]), abs=5)


def test_the_startup_failure_below_the_minimum_viable_fraction(started: dict[str, list[str]]) -> None:
    assert any("Not enough memory" in line for line in started["0.79"])
    numbers = parse_startup(started["0.79"])
    assert numbers.max_total_num_tokens is None and numbers.free1_gib == 19.17
    built = model_from_server(parse_startup(started["0.93"]))
    assert isinstance(built, BudgetModel)
    assert not built.predict(0.79).is_viable and built.predict(0.80).is_viable


def test_every_fraction_against_the_standin_memory_model(started: dict[str, list[str]]) -> None:
    memory = _memory_module()
    profile = memory.KIMI_K26_TP8
    built = model_from_server(parse_startup(started["0.93"]))
    assert isinstance(built, BudgetModel)
    for hundredths in range(80, 96):
        fraction = hundredths / 100
        truth = memory.plan_memory(profile, fraction).max_total_num_tokens
        assert built.predict(fraction).tokens == pytest.approx(truth, rel=0.005), fraction
        assert built.headroom_bytes(fraction) == pytest.approx(memory.plan_memory(profile, fraction).headroom * 2**30)


def test_a_0_5_23_start_logs_its_args_as_a_dict_and_reads_the_same(
    started: dict[str, list[str]], tmp_path: Path
) -> None:
    """sglang 0.5.23 logs ``server_args={…}`` (ServerArgs.resolved_dict); plan and diagnose read it all the same."""
    lines = _startup_lines(tmp_path, "0.93", version="0.5.23")
    assert any("server_args={'model_path': 'moonshotai/Kimi-K2.6'" in line for line in lines), lines[:3]
    assert not any("server_args=ServerArgs(" in line for line in lines)
    new, old = parse_startup(lines), parse_startup(started["0.93"])
    assert new.server_args == old.server_args and new.server_args["mem_fraction_static"] == 0.93
    assert new.max_total_num_tokens == old.max_total_num_tokens
