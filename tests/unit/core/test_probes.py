"""The pure probe parsers, from output shaped like what systemd, sglang and probe.sh.j2 print."""

from __future__ import annotations

import pytest

from remediate.core.diagnosis.explain import explain_crash
from remediate.core.diagnosis.systemd import gave_up_restarting
from remediate.core.probe import (
    ServiceState,
    daemonless_note,
    dropin_order,
    parse_exec_start,
    parse_probe,
    parse_show,
)
from remediate.core.unitfile.argv import server_endpoint
from tests.support.fake_transport import exec_start_value, probe_output


def test_parse_show_keeps_equals_signs_inside_values() -> None:
    text = (
        "Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True HF_HOME=/models\n"
        "ActiveState=active\n"
        "Description=a=b=c\n"
        "Empty=\n"
        "not a property line\n"
    )
    props = parse_show(text)
    assert props["Environment"] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True HF_HOME=/models"
    assert props["Description"] == "a=b=c"
    assert props["Empty"] == ""
    assert props["ActiveState"] == "active"
    assert len(props) == 4


def test_parse_exec_start_systemd_rendering_with_quoted_word() -> None:
    value = (
        '{ path=/bin/bash ; argv[]=/bin/bash -c "exec python3 -m sglang.launch_server --port 31000" ; '
        "ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
    )
    assert parse_exec_start(value) == (("/bin/bash", "-c", "exec python3 -m sglang.launch_server --port 31000"),)


def test_parse_exec_start_several_lines_and_escapes() -> None:
    first = ["/usr/bin/true"]
    second = ["/opt/venv/bin/python3", "-m", "sglang.launch_server", "--served-model-name", 'say "hi"\tnow']
    value = exec_start_value(first, second)
    assert parse_exec_start(value) == (tuple(first), tuple(second))


def test_parse_exec_start_empty() -> None:
    assert parse_exec_start("") == ()


def test_service_state_properties() -> None:
    state = ServiceState(
        unit="sglang.service",
        properties=parse_show(
            "NRestarts=3\nMainPID=0\nNeedDaemonReload=yes\nDropInPaths=/a.conf /b.conf\n"
            "EnvironmentFiles=/etc/default/sglang (ignore_errors=no) /etc/opt (ignore_errors=yes)\n"
        ),
    )
    assert state.n_restarts == 3
    assert state.main_pid == 0
    assert state.needs_daemon_reload
    assert state.dropin_paths == ("/a.conf", "/b.conf")
    assert state.environment_files == (("/etc/default/sglang", False), ("/etc/opt", True))


def test_parse_probe_round_trip() -> None:
    unit_text = "[Service]\nEnvironment=HF_TOKEN=hf_abc123\nExecStart=/usr/bin/python3 -m sglang.launch_server\n"
    non_utf8 = b"SGLANG_ARGS=--x \xff\n"
    argv = ["/usr/bin/python3", "-m", "sglang.launch_server", "--port", "30000"]
    text = probe_output(
        "sglang.service",
        {
            "FragmentPath": "/etc/systemd/system/sglang.service",
            "ExecStart": exec_start_value(argv),
            "ActiveState": "failed",
            "NRestarts": 2,
        },
        {
            "/etc/systemd/system/sglang.service": unit_text * 20,  # several base64 lines
            "/etc/default/sglang": non_utf8,
            "/etc/default/missing": None,
        },
        candidates=["sglang.service"],
        analyze=True,
        now=1234.5,
    )
    found = parse_probe(text, None)
    assert found.candidates == ("sglang.service",)
    assert found.has_systemd_analyze is True
    assert found.now == 1234.5
    assert found.state is not None
    assert found.state.unit == "sglang.service"
    assert found.state.fragment_path == "/etc/systemd/system/sglang.service"
    assert found.state.active_state == "failed"
    assert found.state.n_restarts == 2
    assert found.state.exec_argvs == (tuple(argv),)
    fragment = found.files["/etc/systemd/system/sglang.service"]
    assert fragment.exists and fragment.text == unit_text * 20
    assert fragment.size == len(unit_text * 20) and fragment.mode == "644"
    env = found.files["/etc/default/sglang"]
    assert env.text.encode("utf-8", "surrogateescape") == non_utf8
    assert found.files["/etc/default/missing"].exists is False
    assert list(found.files) == ["/etc/systemd/system/sglang.service", "/etc/default/sglang", "/etc/default/missing"]


def test_parse_probe_several_candidates_has_no_state() -> None:
    found = parse_probe(probe_output(None, {}, candidates=["a.service", "b.service"]), None)
    assert found.candidates == ("a.service", "b.service")
    assert found.state is None
    assert found.files == {}


def test_explain_crash_puts_oom_first_then_crash_then_tail() -> None:
    lines = [
        "Loading safetensors checkpoint shards: 100%",
        "Scheduler hit an exception: Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "noise 1",
        "noise 2",
        "sglang.service: Main process exited, code=exited, status=1/FAILURE",
        "sglang.service: Failed with result 'exit-code'.",
    ]
    picked = explain_crash(lines)
    assert picked[0] == lines[2]
    assert picked[1:4] == [lines[1], lines[5], lines[6]]
    assert picked[4:] == [lines[3], lines[4]]  # then the tail, without repeats
    assert len(picked) == len(set(picked))


def test_explain_crash_limit() -> None:
    lines = [f"CUDA out of memory #{i}" for i in range(30)]
    assert explain_crash(lines, limit=12) == lines[:12]


def test_explain_crash_keeps_systemds_start_limit_line_past_the_limit() -> None:
    """A crash loop of OOM tracebacks fills the 12 lines with OOM text; the line saying systemd gave up
    restarting the unit must survive (on systemd 252 Result= keeps the crash's exit-code: it is the only sign)."""
    lines = [f"torch.OutOfMemoryError: CUDA out of memory #{i}" for i in range(30)]
    lines += ["sglang.service: Start request repeated too quickly.", "sglang.service: Failed with result 'exit-code'."]
    picked = explain_crash(lines, limit=12)
    assert len(picked) == 12 and picked[:11] == lines[:11]
    assert picked[-1] == "sglang.service: Start request repeated too quickly."
    assert gave_up_restarting(picked) and not gave_up_restarting(lines[:30])
    assert gave_up_restarting(["sglang.service: Failed with result 'start-limit-hit'."])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python3", "-m", "sglang.launch_server", "--host", "0.0.0.0", "--port", "30000"], ("127.0.0.1", 30000)),
        (["python3", "-m", "sglang.launch_server", "--port=31000"], ("127.0.0.1", 31000)),
        (["python3", "-m", "sglang.launch_server", "--host=10.0.0.5", "--port", "31001"], ("10.0.0.5", 31001)),
        (["python3", "-m", "sglang.launch_server", "--host", "localhost"], ("127.0.0.1", 30000)),
        (["python3", "-m", "sglang.launch_server"], ("127.0.0.1", 30000)),
    ],
)
def test_server_endpoint(argv: list[str], expected: tuple[str, int]) -> None:
    assert server_endpoint(argv) == expected


def test_unloaded_dropins_count_as_a_pending_daemon_reload() -> None:
    """systemd 252 keeps NeedDaemonReload=no for a drop-in in a new UNIT.d directory; the probe lists it."""
    text = (
        "@@now 1.0\n@@unit app.service\n@@show\nNeedDaemonReload=no\nDropInPaths=\n"
        "@@unloaded /etc/systemd/system/app.service.d/50-x.conf\n@@end\n"
    )
    found = parse_probe(text, None)
    assert found.unloaded_dropins == ("/etc/systemd/system/app.service.d/50-x.conf",)
    assert found.needs_daemon_reload and found.state is not None and not found.state.needs_daemon_reload
    assert not parse_probe(text.replace(" /etc/systemd/system/app.service.d/50-x.conf", ""), None).needs_daemon_reload


def test_dropins_apply_by_file_name_across_directories_first_directory_wins() -> None:
    loaded = ("/etc/systemd/system/a.service.d/20-b.conf", "/run/systemd/system/a.service.d/30-c.conf")
    unloaded = ("/etc/systemd/system/a.service.d/10-a.conf", "/run/systemd/system/a.service.d/20-b.conf")
    assert dropin_order(loaded, unloaded) == [
        "/etc/systemd/system/a.service.d/10-a.conf",
        "/etc/systemd/system/a.service.d/20-b.conf",
        "/run/systemd/system/a.service.d/30-c.conf",
    ]


# Captured from a container-style sandbox host (docker-systemctl-replacement 1.7.1097 as systemctl): its show
# has no FragmentPath=/DropInPaths=/ExecStart=/InvocationID=; the probe adds the two paths after @@daemonless.
DAEMONLESS_PROBE = """@@now 1796462276.367716208
@@analyze 1
@@unit sglang.service
@@show
MainPID=1069
SubState=running
ActiveState=active
NeedDaemonReload=no
Environment=HF_HOME=/models/.cache/huggingface CUDA_HOME=/usr/local/cuda
@@daemonless systemctl.py 1.7.1097
@@show
FragmentPath=/etc/systemd/system/sglang.service
DropInPaths=/etc/systemd/system/sglang.service.d/10-a.conf
@@file exists=1 sha256=00 mode=640 uid=0 gid=0 size=10 path=/etc/systemd/system/sglang.service
W1NlcnZpY2VdCg==
@@unloaded
@@end
"""


def test_a_daemonless_systemctls_probe_reads_as_one_show_with_the_paths_found_on_disk() -> None:
    found = parse_probe(DAEMONLESS_PROBE, "sglang.service")
    assert found.daemonless == "systemctl.py 1.7.1097"
    assert found.state is not None
    assert found.state.fragment_path == "/etc/systemd/system/sglang.service"
    assert found.state.dropin_paths == ("/etc/systemd/system/sglang.service.d/10-a.conf",)
    assert (found.state.main_pid, found.state.active_state, found.state.invocation_id) == (1069, "active", "")
    assert "ExecStart" not in found.state.properties and found.state.exec_argvs == ()
    assert found.files["/etc/systemd/system/sglang.service"].text == "[Service]\n"
    assert "systemctl.py 1.7.1097" in daemonless_note(found.daemonless)
    nameless = parse_probe(DAEMONLESS_PROBE.replace("@@daemonless systemctl.py 1.7.1097", "@@daemonless"), None)
    assert nameless.daemonless == "a systemctl without systemd"


def test_systemds_probe_is_not_daemonless() -> None:
    assert parse_probe(probe_output("sglang.service", {}), "sglang.service").daemonless == ""
