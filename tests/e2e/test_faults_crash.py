"""The fault matrix (issue 13), the crash cells: a new server that is healthy and then dies under ``--probe``,
and crash loops that end in systemd's ``start-limit-hit`` — before remediate arrives, or caused by the new
unit during the wait. Real systemd 252 in nspawn, real sshd, the sglang stand-in; each cell asserts the
promise (old or new bytes, a complete backup, no temp file), the exit code and the message.
"""

from __future__ import annotations

import pytest

from sandbox.units import incident_unit
from tests.support.faults import FIRED, GO, REACHED, changing, promise
from tests.support.faults import clear_markers as _clear_markers
from tests.support.node import FAST_KNOBS, UNIT, UNIT_PATH, Node, poll

pytestmark = pytest.mark.e2e

OLD_TOKENS = 209007  # the incident's 0.94
NEW_TOKENS = 195011  # the recipe's 0.93


def _one_host_once(error: str, node: Node) -> None:
    """The message names its host once and carries none of the script's framing."""
    assert "\n" not in error and error.count(f"{node.host.name}: ") == 1, error
    assert "@@" not in error and "exit: -1" not in error and "::" not in error, error


# -- healthy, then crashes under --probe ----------------------------------------------------------------


def test_healthy_then_crashes_under_the_probe_rolls_back_to_the_old_server(incident: Node) -> None:
    """0.95 without chunking starts (the pool is bigger) and answers /health, but leaves 0.08 GB for a 32k
    prefill's 896 MiB activation spike: the probe's request kills it, and the run puts the old unit back."""
    node = incident
    original = node.bytes(UNIT_PATH)
    run = node.cli(
        "oom",
        "--mem-fraction-static",
        "0.95",
        "--chunked-prefill-size",
        "-1",
        "--probe",
        "32768",
        "--wait-timeout",
        "60",
    )

    assert run.returncode == 1, run
    result = run.result
    assert result["outcome"] == "rolled_back", run
    error = result["error"]
    assert "the probe prefill of 32,768 tokens failed" in error and "rolled back" in error, error
    _one_host_once(error, node)
    phases = [p["name"] for p in result["phases"]]
    assert phases.index("wait") < phases.index("probe") < phases.index("rollback"), phases  # healthy first
    assert any("torch.OutOfMemoryError" in line for line in result["journal"]), result["journal"]
    # the promise: the old bytes, one complete backup of them, no temp file
    promise(node, original, changed=False)
    (backup,) = node.backups(UNIT_PATH)
    assert result["backup"] == backup and node.bytes(backup) == original
    # the old server runs again: the commit's restart, then the undo's
    assert changing(node).count(f"restart {UNIT}") == 2
    node.wait_healthy()
    info = node.server_info()
    assert info["mem_fraction_static"] == 0.94 and info["max_total_num_tokens"] == OLD_TOKENS
    assert node.show("ActiveState")["ActiveState"] == "active"


# -- a crash loop that ends in start-limit-hit ------------------------------------------------------------

# The incident's unit with a start limit systemd reaches in a few seconds: at most 2 starts in 60 s, a
# restart 100 ms after each crash (the incident's RestartSec=10 against systemd's default 5 starts in 10 s
# never gets there). The third start is refused: "Start request repeated too quickly", ActiveState=failed.
# What `systemctl show` says then, on systemd 252: Result=exit-code, not start-limit-hit. systemd keeps a
# unit's first failure result (service_enter_dead() only replaces Result=success), so Result=start-limit-hit
# is only shown when the refused start follows a clean exit; after a crash loop the journal line is the sign.
_LIMIT = "StartLimitIntervalSec=60\nStartLimitBurst=2\n"


def _crash_loop_unit(node: Node) -> str:
    text = incident_unit(node.host.address, node.port)
    assert "[Service]" in text and "RestartSec=10\n" in text and "Restart=on-failure\n" in text
    return text.replace("[Service]\n", f"{_LIMIT}\n[Service]\n", 1).replace("RestartSec=10\n", "RestartSec=100ms\n")


def _result(node: Node) -> str:
    return node.show("Result")["Result"]


def gave_up(node: Node) -> bool:
    """systemd stopped restarting the unit: its start limit was hit (the journal's words, and failed)."""
    hit = any("Start request repeated too quickly" in line for line in node.journal())
    return hit and node.show("ActiveState")["ActiveState"] == "failed"


def _crash_looped(node: Node) -> None:
    """The incident's end state: the old config crash-loops on an OOM (graph capture at 0.94) until systemd
    gives up. systemd 252 keeps the crash's Result=exit-code; the journal says the start limit was hit."""
    node.host.set_standin(**FAST_KNOBS, failure="crash_during_load", failure_match="--mem-fraction-static 0.94")
    node.install(_crash_loop_unit(node), start=False)
    node.host.systemctl("start", UNIT)
    poll(lambda: gave_up(node), deadline=60, what="systemd to give up (start limit)", every=0.1)
    state = node.show("ActiveState", "Result", "NRestarts")
    assert state == {"ActiveState": "failed", "Result": "exit-code", "NRestarts": "2"}, state


def _restarted_too_often(node: Node) -> None:
    """Result=start-limit-hit as systemd 252 shows it: a healthy server (Result=success) restarted by hand
    (or by a watchdog) more often than StartLimitBurst allows: the third start in 60 s is refused."""
    node.install(_crash_loop_unit(node))  # start 1
    assert node.host.systemctl("restart", UNIT).returncode == 0  # start 2
    node.host.systemctl("restart", UNIT)  # start 3: refused
    poll(lambda: _result(node) == "start-limit-hit", deadline=60, what="Result=start-limit-hit", every=0.1)
    assert node.show("ActiveState")["ActiveState"] == "failed"


@pytest.mark.parametrize("how", ["crash-loop", "restarted-too-often"])
def test_a_unit_already_in_start_limit_hit_is_reset_and_remediated(node: Node, how: str) -> None:
    """remediate meets a unit systemd has given up on; a plain start is refused there; the commit's
    reset-failed clears the start limit and the fix comes up."""
    (_crash_looped if how == "crash-loop" else _restarted_too_often)(node)
    refused = node.host.systemctl("start", UNIT)  # what a tool without reset-failed would meet
    assert refused.returncode != 0 and node.show("ActiveState")["ActiveState"] == "failed", refused
    original = node.bytes(UNIT_PATH)

    run = node.cli("oom", "--wait-timeout", "60")

    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated", run
    assert result["max_total_num_tokens"] == NEW_TOKENS
    promise(node, original, changed=True)
    (backup,) = node.backups(UNIT_PATH)
    assert result["backup"] == backup and node.bytes(backup) == original
    assert changing(node)[-3:] == ["daemon-reload", f"reset-failed {UNIT}", f"restart {UNIT}"]
    node.wait_healthy()
    assert node.show("ActiveState", "Result") == {"ActiveState": "active", "Result": "success"}
    assert node.server_info()["max_total_num_tokens"] == NEW_TOKENS


def _pause_the_waits_first_state_read(node: Node) -> None:
    """/usr/local/sbin/systemctl: the first `systemctl show … NRestarts …` after the commit's restart (the
    health wait's state read) waits until the test writes GO — so the new server's crash loop reaches the
    start limit during the wait, deterministically — then runs the audited systemctl."""
    script = (
        "#!/bin/bash\n"
        'case "$*" in\n'
        "  restart\\ *) : > /run/fault.restarted ;;\n"
        "  show\\ *NRestarts*)\n"
        f"    if [ -e /run/fault.restarted ] && mkdir {FIRED} 2>/dev/null; then\n"
        f"      : > {REACHED}; while [ ! -e {GO} ]; do sleep 0.02; done\n"
        "    fi ;;\n"
        "esac\n"
        'exec /usr/local/bin/systemctl "$@"\n'
    )
    node.host.write("/usr/local/sbin/systemctl", script, mode=0o755)


def test_a_new_unit_that_crash_loops_into_start_limit_hit_is_rolled_back(node: Node) -> None:
    """The new config dies at once on every start (exit_at_once, matched on its --chunked-prefill-size 4096):
    systemd restarts it until the start limit, all during the wait. The run names the start limit, puts the
    old bytes back, and the undo's reset-failed lets the old unit start: the old server is healthy again."""
    _clear_markers(node)
    node.host.run("/bin/rm", "-f", "/run/fault.restarted")
    node.host.set_standin(**FAST_KNOBS, failure="exit_at_once", failure_match="--chunked-prefill-size 4096")
    node.install(_crash_loop_unit(node))
    original = node.bytes(UNIT_PATH)
    _pause_the_waits_first_state_read(node)
    try:
        proc = node.popen("oom", "--wait-timeout", "60")
        poll(lambda: node.host.path(REACHED).exists(), deadline=60, what="the wait's first state read")
        poll(lambda: gave_up(node), deadline=60, what="systemd to give up (start limit)", every=0.1)
        node.host.write(GO, "")
        run = node.finish(proc)
    finally:
        node.host.path("/usr/local/sbin/systemctl").unlink(missing_ok=True)
        _clear_markers(node)
        node.host.run("/bin/rm", "-f", "/run/fault.restarted")

    assert run.returncode == 1, run
    result = run.result
    assert result["outcome"] == "rolled_back", run
    error = result["error"]
    assert "crash-looped until systemd's start limit" in error and "rolled back" in error, error
    _one_host_once(error, node)
    assert any("No CUDA GPUs are available" in line for line in result["journal"]), result["journal"]
    promise(node, original, changed=False)
    (backup,) = node.backups(UNIT_PATH)
    assert result["backup"] == backup and node.bytes(backup) == original
    audit = changing(node)
    assert audit.count(f"reset-failed {UNIT}") == 2 and audit.count(f"restart {UNIT}") == 2, audit
    node.wait_healthy()
    assert node.show("ActiveState", "Result") == {"ActiveState": "active", "Result": "success"}
    info = node.server_info()
    assert info["mem_fraction_static"] == 0.94 and info["max_total_num_tokens"] == OLD_TOKENS


def test_when_neither_config_can_start_the_run_says_exactly_what_the_host_holds(node: Node) -> None:
    """The fault is not the config's: every start of the server dies (exit_at_once matched on --model-path). The
    new unit crash-loops, the undo puts the old bytes back and restarts them, the old server dies too: exit 1,
    outcome failed, and the message says the previous bytes are back, the unit was restarted on them, and the
    old server did not come up either. The unit ends on the old bytes; systemd gives up on it (start limit)."""
    node.install(_crash_loop_unit(node))
    original = node.bytes(UNIT_PATH)
    node.host.set_standin(**FAST_KNOBS, failure="exit_at_once", failure_match="--model-path")

    run = node.cli("oom", "--wait-timeout", "60")

    assert run.returncode == 1, run
    result = run.result
    assert result["outcome"] == "failed", run
    error = result["error"]
    assert "the rollback failed too" in error, error
    assert f"the previous bytes of {UNIT_PATH} are back and {UNIT} was restarted on them" in error, error
    assert "the old server did not come up either" in error, error
    _one_host_once(error, node)
    promise(node, original, changed=False)
    (backup,) = node.backups(UNIT_PATH)
    assert result["backup"] == backup and node.bytes(backup) == original
    audit = changing(node)
    assert audit.count(f"reset-failed {UNIT}") == 2 and audit.count(f"restart {UNIT}") == 2, audit
    poll(lambda: gave_up(node), deadline=60, what="systemd to give up on the old unit too", every=0.1)
