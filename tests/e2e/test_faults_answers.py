"""Fault cells: answers from the host that never end, never fit, or come from someone else (issue 20).

Real sandbox hosts. A hung ``nvidia-smi`` is a script first on root's PATH that ignores SIGTERM and never
returns. The bad HTTP answers come from a *squatter*: a process of its own transient unit (not in the
sglang unit's cgroup, not a descendant of its MainPID) that binds the unit's port while the restarted server
is still loading (the stand-in binds only after its load, as sglang does), and answers ``/health`` one byte a
second, or ``/server_info`` nested 100 000 deep, or plausibly as sglang would. In each cell the run ends
within its bounds: no hang, no RecursionError, no squatter taken for the new server; the wait times out and
rolls back to the old unit, which comes back healthy once the squatter is gone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.node import UNIT, UNIT_PATH, Node, poll
from tests.support.squatter import SQUATTER, SQUATTER_UNIT
from tests.support.squatter import SQUATTER_SCRIPT as _SQUATTER

pytestmark = pytest.mark.e2e

LOCK = f"/run/remediate/{UNIT}.lock"
SMI = "/usr/local/sbin/nvidia-smi"
# a hung driver (after an Xid error): no answer, TERM ignored
HUNG_SMI = "#!/bin/bash\ntrap '' TERM\nwhile :; do sleep 1; done\n"


def lock_is_free(node: Node) -> bool:
    """No process holds the unit's lock: `flock -n` takes it at once (and lets it go)."""
    return node.host.run("/usr/bin/flock", "-n", LOCK, "/bin/true").returncode == 0


def lock_goes_free(node: Node) -> None:
    """The run's lock holder lets go within its own bound once the run ended (templates/probe.sh.j2 keeps the
    lock 0.3 s more, and while a commit of the run still holds the commit lock): nothing else keeps it."""
    poll(lambda: lock_is_free(node), deadline=10, what=f"{LOCK} free")


# A query stuck in the kernel (uninterruptible sleep) outlives its KILL: modelled by a child that leaves
# timeout's process group (setsid) and keeps every fd it inherited, the pipe to the probe included.
STUCK_SMI = "#!/bin/bash\nsetsid sleep 600 &\ntrap '' TERM\nwhile :; do sleep 1; done\n"


def _pids(node: Node, pattern: str) -> list[str]:
    return node.host.run("/usr/bin/pgrep", "-f", pattern).stdout.split()


@pytest.fixture(params=["hung", "stuck"])
def hung_smi(incident: Node, request: pytest.FixtureRequest) -> Iterator[Node]:
    incident.host.write(SMI, HUNG_SMI if request.param == "hung" else STUCK_SMI, mode=0o755)
    yield incident
    incident.host.run("/bin/rm", "-f", SMI)
    for pid in _pids(incident, SMI) + _pids(incident, "^sleep 600$"):
        incident.host.run("/bin/kill", "-9", pid)


def test_a_hung_nvidia_smi_is_timed_out_noted_and_keeps_no_lock(hung_smi: Node) -> None:
    node = hung_smi
    stuck = node.host.path(SMI).read_text() == STUCK_SMI
    # --smi-timeout 1 (the least): each query is TERMed at 1 s, KILLed at 2 s (the default 10 s bound is the same code)
    run = node.cli("oom", "--wait-timeout", "60", "--smi-timeout", "1")
    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert any("nvidia-smi timed out (no answer within 1 s" in n for n in run.result["notes"]), run
    # the hung queries were killed (timeout -k); whatever outlived them holds no lock fd: the unit is not locked
    poll(lambda: not _pids(node, SMI), deadline=10, what="no hung nvidia-smi")
    if stuck:
        assert _pids(node, "^sleep 600$"), "the stuck query outlives the run, as one in the kernel does"
    lock_goes_free(node)
    if stuck:
        return  # diagnose reads nvidia-smi the same way: one variant shows it (a stuck query costs 10 s a read)
    diagnosis = node.cli("diagnose", "--smi-timeout", "1")
    assert diagnosis.returncode == 0, diagnosis
    assert any("nvidia-smi timed out (no answer within 1 s" in n for n in diagnosis.result["notes"]), diagnosis
    lock_goes_free(node)


@pytest.fixture
def squatting(incident: Node) -> Iterator[Node]:
    """The new server (the one with the OOM fix) loads for ~9 s before it binds; the old one ~1 s."""
    node = incident
    node.host.set_standin(time_scale=0.002, failure="slow_load", failure_match="4096")  # 9 s > --wait-timeout 8
    node.host.write(SQUATTER, _SQUATTER)
    yield node
    node.host.systemctl("stop", SQUATTER_UNIT)


def _squat_during_the_wait(node: Node, mode: str) -> tuple[object, str]:
    """Run oom; squat the port right after its restart; leave when the rollback restarts the old unit."""
    original = node.bytes(UNIT_PATH)
    proc = node.popen("oom", "--wait-timeout", "8")
    restarts = f"restart {UNIT}"
    poll(lambda: restarts in node.audit(), deadline=60, what="the commit's restart")
    started = node.host.run(
        "/usr/bin/systemd-run", f"--unit={SQUATTER_UNIT}", "--quiet", "/usr/bin/python3", SQUATTER,
        node.host.address, str(node.port), mode,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    poll(lambda: node.audit().count(restarts) >= 2, deadline=60, what="the rollback's restart")
    node.host.systemctl("stop", SQUATTER_UNIT)
    run = node.finish(proc)
    assert node.bytes(UNIT_PATH) == original, "the rollback restored the old unit"
    return run, run.result.get("error") or ""


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("trickle", ("no complete answer within",)),  # a poll is bounded in total, not per byte
        # /server_info 100 000 deep: a bad answer (no crash); the journal's capacity line may stand in for it,
        # and then the socket is still not the unit's
        ("nested", ("waiting for max_total_num_tokens", "not our server")),
        ("plausible", ("not our server",)),  # /health 200, server_info plausible: still not the unit's socket
    ],
    ids=["trickling-health", "nested-server-info", "squatter-on-the-port"],
)
def test_a_bad_answer_on_the_port_is_never_the_new_server_and_rolls_back(
    squatting: Node, mode: str, why: tuple[str, ...]
) -> None:
    run, error = _squat_during_the_wait(squatting, mode)
    assert run.returncode == 1, run  # type: ignore[attr-defined]
    assert run.result["outcome"] != "remediated", run  # type: ignore[attr-defined]
    assert "not healthy after 8s" in error and any(w in error for w in why), run
    assert "Traceback" not in run.stderr  # type: ignore[attr-defined]
    squatting.wait_healthy()  # the old unit's server, once the squatter left
    lock_goes_free(squatting)
