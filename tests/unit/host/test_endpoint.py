"""Where the health wait looks: the unit's own --host/--port; the inventory's server_port only when the command
line names no port. (An inventory default `server_port: 30000`, as the example inventory has, overrode the
unit's --port 34592: the wait polled a closed port until --wait-timeout.)"""

from __future__ import annotations

import pytest

from remediate.core.probe import ProbeResult, RemoteFile, ServiceState
from remediate.errors import ConfigError
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import endpoint_of

ARGV = "/opt/sglang/bin/python3 -m sglang.launch_server --model-path /m --host 10.0.0.5"


def _found(argv: str) -> ProbeResult:
    exec_start = f"{{ path=/opt/sglang/bin/python3 ; argv[]={argv} ; ignore_errors=no ; start_time=[n/a] }}"
    state = ServiceState(unit="sglang.service", properties={"ExecStart": exec_start})
    return ProbeResult(candidates=(), state=state, files={}, has_systemd_analyze=True, now=0.0)


@pytest.mark.parametrize(
    ("argv", "server_port", "expected"),
    [
        pytest.param(ARGV + " --port 34592", 30000, ("10.0.0.5", 34592), id="the-unit-s-port-wins"),
        pytest.param(ARGV + " --port=34592", 30000, ("10.0.0.5", 34592), id="the-eq-form-too"),
        pytest.param(ARGV, 31000, ("10.0.0.5", 31000), id="the-setting-when-the-unit-names-none"),
        pytest.param(ARGV, None, ("10.0.0.5", 30000), id="sglang-s-default"),
    ],
)
def test_the_unit_s_port_is_where_the_wait_looks(argv: str, server_port: int | None, expected: tuple[str, int]) -> None:
    assert endpoint_of(_found(argv), RunOptions(server_port=server_port)) == expected


# ------------------------------------------------------------------ containers: the host port of -p/--publish

UNIT = "/etc/systemd/system/sglang.service"
SERVER = "img python3 -m sglang.launch_server --model-path /m --host 0.0.0.0 --port 30000"


def _docker(run_options: str, tool: str = "/usr/bin/docker") -> ProbeResult:
    text = f"[Service]\nExecStart={tool} run --rm {run_options} {SERVER}\n"
    argv = f"{tool} run --rm {run_options} {SERVER}"
    exec_start = f"{{ path={tool} ; argv[]={argv} ; ignore_errors=no ; start_time=[n/a] }}"
    state = ServiceState(unit="sglang.service", properties={"ExecStart": exec_start, "FragmentPath": UNIT})
    files = {UNIT: RemoteFile(UNIT, True, text)}
    return ProbeResult(candidates=(), state=state, files=files, has_systemd_analyze=True, now=0.0)


@pytest.mark.parametrize(
    ("run_options", "expected"),
    [
        ("-p 8000:30000", ("127.0.0.1", 8000)),
        ("-p8000:30000", ("127.0.0.1", 8000)),
        ("-p=8000:30000", ("127.0.0.1", 8000)),
        ("--publish 8000:30000", ("127.0.0.1", 8000)),
        ("--publish=8000:30000/tcp", ("127.0.0.1", 8000)),
        ("-p 127.0.0.2:8000:30000", ("127.0.0.2", 8000)),
        ("-p [::1]:8000:30000", ("::1", 8000)),
        ("-p 0.0.0.0:8000:30000", ("127.0.0.1", 8000)),
        ("-p 8000-8001:29999-30000", ("127.0.0.1", 8001)),
        ("-p 9000:9000 -p 8000:30000", ("127.0.0.1", 8000)),
        ("-p 7000:30000/udp -p 8000:30000", ("127.0.0.1", 8000)),
        ("--network host", ("127.0.0.1", 30000)),
        ("--net=host", ("127.0.0.1", 30000)),
        ("-p 30000:30000", ("127.0.0.1", 30000)),
    ],
)
def test_a_container_is_reached_through_its_published_host_port(run_options: str, expected: tuple[str, int]) -> None:
    assert endpoint_of(_docker(run_options), RunOptions()) == expected


def test_podman_too() -> None:
    assert endpoint_of(_docker("-p 8000:30000", "/usr/bin/podman"), RunOptions()) == ("127.0.0.1", 8000)


@pytest.mark.parametrize(
    ("run_options", "message"),
    [
        ("", r"^the server's port 30000 in the container is not published: it is not reachable from the host "
             r"and the health wait cannot work; add `-p 30000:30000` or `--network host` to `docker run`$"),
        ("--network bridge -p 8000:8000", r"not published \(--network bridge\)"),
        ("-p 30000", r"on a host port docker picks at start: give it one \(-p 30000:30000\)"),
        ("-P", r"`docker run -P` publishes"),
        ("-p x:30000", r"`docker run -p x:30000` is not a port mapping remediate can read"),
    ],
)  # fmt: skip
def test_a_container_the_host_cannot_reach_fails_early_with_one_line(run_options: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        endpoint_of(_docker(run_options), RunOptions())
