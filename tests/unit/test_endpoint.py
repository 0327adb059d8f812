"""Where the health wait looks: the unit's own --host/--port; the inventory's server_port only when the command
line names no port. (An inventory default `server_port: 30000`, as the example inventory has, overrode the
unit's --port 34592: the wait polled a closed port until --wait-timeout.)"""

from __future__ import annotations

import pytest

from remediate.core.probes import ProbeResult, ServiceState
from remediate.host.options import RunOptions
from remediate.host.read import endpoint_of

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
