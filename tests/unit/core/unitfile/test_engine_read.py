"""Which engine a unit runs: one answer (core/unitfile/engine.py) — systemd's loaded ExecStart=, the disk's
only where that is unknown or a daemon-reload is pending, and then said."""

from __future__ import annotations

import pytest

from remediate.core.engines import SGLANG, VLLM, Engine
from remediate.core.probe import ProbeResult, ServiceState
from remediate.core.unitfile.edit import SourceFile, UnitSources
from remediate.core.unitfile.engine import read_engine

UNIT = "/etc/systemd/system/llm.service"
SGLANG_LINE = "/usr/bin/python3 -m sglang.launch_server --model-path /m"
VLLM_LINE = "/usr/bin/vllm serve /m --port 8000"


def _found(loaded: str | None, *, reload: bool) -> ProbeResult:
    props = {"FragmentPath": UNIT, "NeedDaemonReload": "yes" if reload else "no"}
    if loaded is not None:
        path = loaded.split()[0]
        props["ExecStart"] = f"{{ path={path} ; argv[]={loaded} ; ignore_errors=no ; start_time=[n/a] }}"
    state = ServiceState(unit="llm.service", properties=props)
    return ProbeResult(candidates=(), state=state, files={}, has_systemd_analyze=True, now=0.0)


def _disk(line: str) -> UnitSources:
    return UnitSources(fragment=SourceFile(path=UNIT, text=f"[Service]\nExecStart={line}\n"))


@pytest.mark.parametrize(
    ("loaded", "disk", "reload", "engine", "has_note"),
    [
        pytest.param(VLLM_LINE, SGLANG_LINE, False, VLLM, False, id="loaded-wins-without-a-pending-reload"),
        pytest.param(SGLANG_LINE, VLLM_LINE, True, VLLM, True, id="a-pending-reload-reads-the-disk-and-says-so"),
        pytest.param(VLLM_LINE, VLLM_LINE, True, VLLM, False, id="a-pending-reload-that-agrees-says-nothing"),
        pytest.param(None, VLLM_LINE, False, VLLM, False, id="no-execstart-shown-reads-the-disk"),
        pytest.param("/opt/run.sh", "/opt/run.sh", False, SGLANG, False, id="neither-tells-the-default"),
    ],
)
def test_one_answer(loaded: str | None, disk: str, reload: bool, engine: Engine, has_note: bool) -> None:
    read = read_engine(_found(loaded, reload=reload), _disk(disk))
    assert read.engine is engine
    assert (read.note is not None) == has_note
    if read.note:
        assert "daemon-reload is pending" in read.note and "vLLM" in read.note


def test_unreadable_disk_keeps_the_loaded_engine() -> None:
    assert read_engine(_found(VLLM_LINE, reload=True), None).engine is VLLM
