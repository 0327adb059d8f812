"""The new server is ours: the listening socket the endpoint reaches is held by the unit's processes
(core/listener.py, host/common/listener.py), and the health wait never takes a squatter's answer for it."""

from __future__ import annotations

import json

import pytest

from remediate.core.listener import Listener, parse_listeners, who
from remediate.host.common.health import wait_healthy
from remediate.host.common.listener import judge_owner, listener_script, parse_look, parse_owner, reached
from tests.support.clock import Naps
from tests.support.fake_transport import listener_output
from tests.support.hosts import waiting_host

UNIT = "sglang.service"
ENDPOINT = ("127.0.0.1", 30000)
SS = [
    "State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process",
    "LISTEN 0      2048       127.0.0.1:30000      0.0.0.0:* ino:4711 sk:1 cgroup:/system.slice/sglang.service <->",
    "LISTEN 0      5          [::]:30000         [::]:* ino:4712 sk:2 cgroup:/user.slice v6only:1 <->",
]


def test_ss_lines_give_address_port_and_inode_and_the_header_is_skipped() -> None:
    assert parse_listeners(SS) == (Listener("127.0.0.1", 30000, 4711), Listener("::", 30000, 4712))


def test_an_exact_address_wins_over_a_wildcard() -> None:
    listeners = parse_listeners(SS)
    assert reached(listeners, "127.0.0.1") == (listeners[0],)
    assert reached(listeners, "10.0.0.5") == (listeners[1],)  # only the wildcard can take it
    assert reached(listeners, "localhost") == listeners  # a name: any of them


def test_the_units_socket_is_ours_and_a_strangers_is_not() -> None:
    listeners = parse_listeners(SS)
    assert judge_owner(listeners, frozenset({4711}), ENDPOINT, UNIT, "").is_ours
    squatted = judge_owner(listeners, frozenset({99}), ENDPOINT, UNIT, "python3 pid 9999")
    assert not squatted.is_ours
    assert squatted.why == f"127.0.0.1:30000 is held by a process outside {UNIT} (python3 pid 9999): not our server"
    assert not judge_owner((), frozenset({4711}), ENDPOINT, UNIT, "").is_ours  # nothing listens any more


def test_a_process_name_decides_nothing_and_is_shown_printable() -> None:
    # comm is the squatter's to choose: it may spell another pid; only the kernel's inode numbers decide
    line = 'LISTEN 0 5 127.0.0.1:30000 0.0.0.0:* users:(("x\\",pid=1,fd=3",pid=9999,fd=3))'
    assert "9999" in who([line])
    text = listener_output(ours=False, who='users:(("sglang",pid=4242,fd=7))')
    assert not parse_owner(text, UNIT, ENDPOINT).is_ours


def test_the_check_script_quotes_the_unit() -> None:
    script = listener_script("a'$(touch /tmp/x)'.service", 30000)
    assert "unit='a'\"'\"'$(touch /tmp/x)'\"'\"'.service'" in script


def test_a_container_unit_is_not_checked_and_says_why() -> None:
    text = listener_output(ours=False).replace(
        "ExecStart=\n", "ExecStart={ path=/bin/bash ; argv[]=/bin/bash -c exec docker run img ; ignore_errors=no }\n"
    )
    owner = parse_owner(text, UNIT, ENDPOINT)
    assert owner.is_ours and "container" in owner.why


def test_a_host_where_ss_fails_is_accepted_unchecked_and_says_why() -> None:
    text = listener_output(ours=False).replace("@@listen\n", "@@listen\n@@nosockets\n")
    owner = parse_owner(text, UNIT, ENDPOINT)
    assert owner.is_ours and "not checked" in owner.why


RUNNING = {"ActiveState": "active", "SubState": "running", "NRestarts": 0, "InvocationID": "inv-2"}


def test_the_last_look_brings_the_units_state_and_the_environment_after_its_end() -> None:
    environ = "@@main 4242\n@@environ 4243\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n@@nosockets\n@@end\n"
    look = parse_look(listener_output(state=RUNNING, environ=environ), UNIT, ENDPOINT, environ=True)
    assert look.owner.is_ours and look.owner.why == "sglang.service holds 127.0.0.1:30000"  # not @@nosockets
    assert look.state is not None and look.state.active_state == "active" and look.state.main_pid == 4242
    assert look.environ and look.env is not None and look.env.pid == 4243
    assert look.env.values["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True\n@@nosockets"


@pytest.mark.parametrize(
    "text",
    [listener_output(), "@@show\nMainPID=5\nActiveState=active\n", listener_output(state=RUNNING)[:-20]],
)
def test_a_look_without_its_state_or_environment_says_so(text: str) -> None:
    look = parse_look(text, UNIT, ENDPOINT, environ=True)
    assert look.state is None and not look.environ and look.env is None  # the wait reads them on its own


def test_the_look_reads_the_environment_only_when_asked() -> None:
    assert "@@main" not in listener_script(UNIT, 30000)
    assert "@@main" in listener_script(UNIT, 30000, environ=True)
    assert listener_script(UNIT, 30000, environ=True).count("systemctl show") == 2  # one, and the environ fallback


def test_an_unfinished_check_is_not_ours() -> None:
    assert not parse_owner("@@show\nMainPID=5\n", UNIT, ENDPOINT).is_ours


def test_the_wait_waits_past_a_squatter_naming_it_until_the_unit_holds_the_port(naps: Naps) -> None:
    host = waiting_host(200, info=(200, json.dumps({"max_total_num_tokens": 195011})))
    host.on(r"\A# remediate: listener", *([listener_output(ours=False)] * 3), listener_output())
    progress: list[str] = []
    healthy = wait_healthy(
        host,
        UNIT,
        ENDPOINT,
        timeout=3600,
        restart_epoch=None,
        invocation_id="inv-2",
        on_progress=lambda phase, _elapsed, _line: progress.append(phase),
        sleep=naps,
    )
    assert healthy.polls == 4  # three answers from the squatter were not taken for the new server
    assert len(progress) == 3
    assert all("outside sglang.service (python3 pid 9999): not our server" in p for p in progress)
