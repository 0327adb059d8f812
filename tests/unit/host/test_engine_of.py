"""Every step's one answer to "which engine is this unit?" (host/common/probe.py ``engine_of``): systemd's loaded
ExecStart=, the disk's only where a daemon-reload is pending, and then said in the result's notes."""

from __future__ import annotations

from remediate.core.engines import SGLANG, VLLM
from remediate.core.probe import ProbeResult, RemoteFile, ServiceState
from remediate.host.common.outcome import new_result, record_unit
from remediate.host.common.probe import engine_of, engine_read, sources_from_probe

UNIT = "/etc/systemd/system/llm.service"
LOADED = "/usr/bin/python3 -m sglang.launch_server --model-path /m"
ON_DISK = "/usr/bin/vllm serve /m --port 8000"


def _found(*, reload: bool) -> ProbeResult:
    exec_start = f"{{ path=/usr/bin/python3 ; argv[]={LOADED} ; ignore_errors=no ; start_time=[n/a] }}"
    props = {"ExecStart": exec_start, "FragmentPath": UNIT, "NeedDaemonReload": "yes" if reload else "no"}
    files = {UNIT: RemoteFile(UNIT, True, f"[Service]\nExecStart={ON_DISK}\n")}
    state = ServiceState(unit="llm.service", properties=props)
    return ProbeResult(candidates=(), state=state, files=files, has_systemd_analyze=True, now=0.0)


def test_the_loaded_unit_is_the_answer_without_a_pending_reload() -> None:
    found = _found(reload=False)
    assert engine_of(found) is SGLANG and engine_read(found).note is None


def test_a_pending_reload_reads_the_disk_and_the_result_says_so() -> None:
    found = _found(reload=True)
    assert engine_of(found) is VLLM
    result = new_result("h", lambda: 0.0)
    record_unit(result, found, sources_from_probe(found))
    [note] = [n for n in result.notes if "daemon-reload is pending" in n]
    assert "sglang" in note and "vLLM" in note and "llm.service" in note
