"""Issue 24, several sglang units on one host: `diagnose` without --unit shows each, `oom` without --unit
fixes the crashed one and leaves the other's process alone (same MainPID, NRestarts, invocation), refuses in
one line when none crashed, and `oom --unit 'sglang@*'` picks the crashed instance of a template."""

from __future__ import annotations

import dataclasses

import pytest

from sandbox.units import free_port, incident_unit
from tests.support.node import Node, poll

pytestmark = pytest.mark.e2e

CHAT, EMBED = "sglang-chat.service", "sglang-embed.service"
UNTOUCHED = ("MainPID", "NRestarts", "InvocationID", "ActiveState")


def _no_restart(text: str) -> str:
    """The incident's unit without Restart=on-failure: a crashed server stays crashed (its latest run is the
    crash, not a later good start), so what `oom` picks does not race systemd's RestartSec."""
    assert "Restart=on-failure" in text
    return text.replace("Restart=on-failure", "Restart=no")


def _second_port(node: Node) -> int:
    port = free_port(node.host.address)
    while port == node.port:
        port = free_port(node.host.address)
    return port


def _crash(node: Node, unit: str) -> None:
    """A 32k prefill kills the 0.94 server listening on the node's port (the incident)."""
    for seed in (1, 2):
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should kill the 0.94 server"
    poll(
        lambda: any("CUDA out of memory" in line for line in node.journal(unit)),
        deadline=10,
        what=f"the OOM traceback in {unit}'s journal",
    )
    poll(lambda: node.show("ActiveState", unit=unit)["ActiveState"] == "failed", deadline=10, what=f"{unit} failed")


def _argv(exec_start: str) -> str:
    return exec_start.split("argv[]=", 1)[1].split(" ; ", 1)[0]


def test_two_units_diagnosed_each_and_only_the_crashed_one_fixed(node: Node) -> None:
    other = _second_port(node)
    node.install(_no_restart(incident_unit(node.host.address, node.port)), name=CHAT)
    node.install(_no_restart(incident_unit(node.host.address, other)), name=EMBED, start=False)
    assert node.host.systemctl("start", EMBED).returncode == 0
    dataclasses.replace(node, port=other).wait_healthy(EMBED)
    _crash(node, CHAT)
    before = node.show(*UNTOUCHED, "ExecStart", unit=EMBED)
    before_argv = _argv(before.pop("ExecStart"))

    diagnosed = node.cli("diagnose")
    assert diagnosed.returncode == 0, diagnosed
    rows = {r["unit"]: r for r in diagnosed.document["results"]}  # type: ignore[index]
    assert sorted(rows) == [CHAT, EMBED] and {r["host"] for r in rows.values()} == {node.host.name}
    assert any(f["kind"] == "cuda_oom_runtime" for f in rows[CHAT]["findings"]), rows[CHAT]
    assert rows[EMBED]["findings"] == [] and rows[EMBED]["active_state"] == "active"
    assert f"--unit {CHAT}" in rows[CHAT]["recommendation"]["command"]
    human = node.cli("diagnose", json_out=False)
    assert human.returncode == 0 and CHAT in human.stdout and EMBED in human.stdout, human

    run = node.cli("oom", "--wait-timeout", "60")
    assert run.returncode == 0, run
    assert run.result["unit"] == CHAT and run.result["outcome"] == "remediated", run
    argv = node.server_argv(CHAT)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.93"
    after = node.show(*UNTOUCHED, "ExecStart", unit=EMBED)
    assert _argv(after.pop("ExecStart")) == before_argv and after == before, "the healthy unit was touched"
    assert node.backups(f"/etc/systemd/system/{EMBED}") == []
    assert len(node.backups(f"/etc/systemd/system/{CHAT}")) == 1

    status = node.cli("status")
    assert status.returncode == 0, status
    states = {r["unit"]: r["remediated"] for r in status.document["results"]}  # type: ignore[index]
    assert states == {CHAT: True, EMBED: False}

    # Now none crashed (the chat server's latest run is healthy): a one-line refusal naming both; nothing runs.
    chat_before = node.show(*UNTOUCHED, unit=CHAT)
    refused = node.cli("oom", "--wait-timeout", "60")
    assert refused.returncode == 2, refused
    error = refused.result["error"]
    assert "\n" not in error and CHAT in error and EMBED in error and "none crashed" in error, error
    assert f"--unit {CHAT}" in error
    assert node.show(*UNTOUCHED, unit=CHAT) == chat_before
    after = node.show(*UNTOUCHED, "ExecStart", unit=EMBED)
    assert _argv(after.pop("ExecStart")) == before_argv and after == before


def test_a_glob_fixes_the_crashed_instance_of_a_template(node: Node) -> None:
    template = _no_restart(incident_unit(node.host.address, node.port)).replace(f"--port {node.port}", "--port %i")
    other = _second_port(node)
    crashed, sibling = f"sglang@{node.port}.service", f"sglang@{other}.service"
    node.install(template, name="sglang@.service", start=False)
    for unit, port in ((crashed, node.port), (sibling, other)):
        assert node.host.systemctl("start", unit).returncode == 0
        dataclasses.replace(node, port=port).wait_healthy(unit)

    status = node.cli("status")  # detection finds the template, the host lists its running instances
    assert status.returncode == 0, status
    assert sorted(r["unit"] for r in status.document["results"]) == sorted([crashed, sibling])  # type: ignore[index]

    _crash(node, crashed)
    before = node.show(*UNTOUCHED, "ExecStart", unit=sibling)
    before_argv = _argv(before.pop("ExecStart"))
    run = node.cli("oom", "--unit", "sglang@*", "--wait-timeout", "60")
    assert run.returncode == 0, run
    assert run.result["unit"] == crashed and run.result["outcome"] == "remediated", run
    after = node.show(*UNTOUCHED, "ExecStart", unit=sibling)
    assert _argv(after.pop("ExecStart")) == before_argv and after == before, "the sibling was touched"
    assert node.show("DropInPaths", unit=sibling)["DropInPaths"] == ""
