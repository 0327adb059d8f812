"""Issue 24: two instances of one template on one host; the crashed one is fixed by its own drop-in and
verified, and its sibling is provably untouched (same ExecStart, restart counter, process, invocation).

The two instances run on different GPUs of a 16-GPU stand-in host, as two TP8 instances would on the two
halves of a real one: the template's CUDA_VISIBLE_DEVICES=0-7, the sibling's drop-in's 8-15. The sibling's
processes are then never the crashed instance's neighbours (whether or not Restart= already brought it back)."""

from __future__ import annotations

import dataclasses

import pytest

from sandbox.units import INCIDENT, free_port, sandbox_unit
from tests.support.node import FAST_KNOBS, Node, poll

pytestmark = pytest.mark.e2e

TEMPLATE = "sglang@.service"
TEMPLATE_PATH = f"/etc/systemd/system/{TEMPLATE}"
SIBLING_PROPS = ("ExecStart", "NRestarts", "MainPID", "InvocationID")
KNOBS = {**FAST_KNOBS, "gpus": 16}
FIRST_GPUS, SIBLING_GPUS = ",".join(map(str, range(8))), ",".join(map(str, range(8, 16)))


def _template(node: Node) -> str:
    text = sandbox_unit(INCIDENT.read_text(), node.host.address)
    assert "--port 30000" in text, "examples/incident/sglang.service changed shape"
    assert "[Service]\n" in text
    text = text.replace("[Service]\n", f"[Service]\nEnvironment=CUDA_VISIBLE_DEVICES={FIRST_GPUS}\n", 1)
    return text.replace("--port 30000", "--port %i")  # the instance name is its port


def _gpus_dropin(unit: str) -> str:
    return f"/etc/systemd/system/{unit}.d/10-gpus.conf"


def _argv(exec_start: str) -> str:
    return exec_start.split("argv[]=", 1)[1].split(" ; ", 1)[0]


def _two_instances(node: Node) -> tuple[str, str]:
    """sglang@PORT_A (the node's port, GPUs 0-7) and sglang@PORT_B (GPUs 8-15) of one template, both healthy."""
    sibling_port = free_port(node.host.address)
    while sibling_port == node.port:
        sibling_port = free_port(node.host.address)
    crashed, sibling = f"sglang@{node.port}.service", f"sglang@{sibling_port}.service"
    node.host.set_standin(**KNOBS)
    node.host.write(_gpus_dropin(sibling), f"[Service]\nEnvironment=CUDA_VISIBLE_DEVICES={SIBLING_GPUS}\n")
    node.install(_template(node), name=TEMPLATE, start=False)
    for unit, port in ((crashed, node.port), (sibling, sibling_port)):
        assert node.host.systemctl("start", unit).returncode == 0
        dataclasses.replace(node, port=port).wait_healthy(unit)
    return crashed, sibling


def test_crashed_instance_fixed_by_its_dropin_sibling_untouched(node: Node) -> None:
    crashed, sibling = _two_instances(node)
    template_sha = node.sha(TEMPLATE_PATH)
    before = node.show(*SIBLING_PROPS, unit=sibling)
    # Both running: nvidia-smi lists the sibling's process on GPUs 8-15 only, so it is no neighbour of the first.
    healthy = node.cli("diagnose", "--unit", crashed)
    assert healthy.returncode == 0 and healthy.result["foreign_gpu_processes"] == [], healthy.result
    uuids = {g["index"]: g["uuid"] for g in healthy.result["gpus"]}
    on = {p["gpu_uuid"] for p in healthy.result["gpu_processes"] if p["pid"] == int(before["MainPID"])}
    assert len(uuids) == 16 and on == {uuids[g] for g in range(8, 16)}, healthy.result
    # ExecStart='s runtime fields (start_time, pid) are not kept across a daemon-reload: its command is compared.
    before_argv = _argv(before.pop("ExecStart"))

    for seed in (1, 2):
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should kill the 0.94 instance"
    poll(
        lambda: any("CUDA out of memory" in line for line in node.journal(crashed)),
        deadline=10,
        what="the OOM traceback in the crashed instance's journal",
    )

    diagnosed = node.cli("diagnose", "--unit", crashed)
    assert diagnosed.returncode == 0 and diagnosed.result["unit"] == crashed, diagnosed
    assert any(f["kind"] == "cuda_oom_runtime" for f in diagnosed.result["findings"]), diagnosed.result
    status = node.cli("status", "--unit", crashed)
    assert status.returncode == 0 and status.result["remediated"] is False, status

    run = node.cli("oom", "--unit", crashed, "--wait-timeout", "60")
    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert run.result["unit"] == crashed

    dropin = f"/etc/systemd/system/{crashed}.d/90-remediate-oom.conf"
    text = node.host.read(dropin)
    assert text.startswith("# Written by remediate (oom)")
    assert "ExecStart=\n" in text and "--port %i" in text, text
    assert node.mode(dropin) == 0o644 and node.mode(f"/etc/systemd/system/{crashed}.d") == 0o755
    assert node.sha(TEMPLATE_PATH) == template_sha, "the template is shared: it must not change"
    assert node.backups(TEMPLATE_PATH) == []
    assert node.show("DropInPaths", unit=crashed)["DropInPaths"] == dropin
    argv = node.server_argv(crashed)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.93"
    assert node.server_env(crashed).get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"

    after = node.show(*SIBLING_PROPS, unit=sibling)
    assert _argv(after.pop("ExecStart")) == before_argv, "the sibling's command changed"
    assert after == before, "the sibling must not be restarted"
    assert node.show("DropInPaths", unit=sibling)["DropInPaths"] == _gpus_dropin(sibling)
    assert not any(sibling in line for line in node.audit()), node.audit()

    status = node.cli("status", "--unit", crashed)
    assert status.returncode == 0 and status.result["remediated"] is True, status
    assert status.result["flags"]["before"]["mem_fraction_static"] == "0.93", status.result
    again = node.cli("oom", "--unit", crashed, "--wait-timeout", "60")
    assert again.returncode == 0 and again.result["outcome"] == "unchanged", again
    assert node.host.read(dropin) == text

    # Rollback of the drop-in remediate created: the file goes, the instance is back on the template's 0.94.
    back = node.cli("rollback", "--unit", crashed, "--wait-timeout", "60")
    assert back.returncode == 0 and back.result["outcome"] == "restored", back
    assert dropin.rsplit("/", 1)[1] not in node.ls(f"/etc/systemd/system/{crashed}.d")
    assert node.show("DropInPaths", unit=crashed)["DropInPaths"] == ""
    argv = node.server_argv(crashed)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.94"
    assert node.sha(TEMPLATE_PATH) == template_sha
    after = node.show(*SIBLING_PROPS, unit=sibling)
    assert _argv(after.pop("ExecStart")) == before_argv and after == before


def test_an_instance_that_fails_to_come_up_loses_the_new_dropin_again(node: Node) -> None:
    """The auto-rollback of a created drop-in removes it: the instance is back on the template's bytes."""
    instance, sibling = _two_instances(node)
    template_sha = node.sha(TEMPLATE_PATH)
    before = node.show(*SIBLING_PROPS, unit=sibling)
    before_argv = _argv(before.pop("ExecStart"))
    node.host.set_standin(**KNOBS, failure="crash_during_load")

    proc = node.popen("oom", "--unit", instance, "--wait-timeout", "60")
    poll(
        lambda: any("Capture cuda graph failed" in line for line in node.journal(instance)),
        deadline=30,
        what="the remediated instance to crash",
    )
    node.host.set_standin(**KNOBS)
    run = node.finish(proc)

    assert run.returncode == 1 and run.result["outcome"] == "rolled_back", run
    assert "90-remediate-oom.conf" not in node.ls(f"/etc/systemd/system/{instance}.d")
    assert node.show("DropInPaths", unit=instance)["DropInPaths"] == ""
    node.wait_healthy(instance)
    argv = node.server_argv(instance)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.94"
    assert node.sha(TEMPLATE_PATH) == template_sha
    after = node.show(*SIBLING_PROPS, unit=sibling)
    assert _argv(after.pop("ExecStart")) == before_argv and after == before


def test_plan_and_bench_read_the_named_instance_on_its_own_port(node: Node) -> None:
    """`plan` and `bench` on an instance: its own journal and its own port (the other instance, on the node's
    port, is stopped, so an answer from the wrong port cannot pass)."""
    stopped, instance = _two_instances(node)
    assert node.host.systemctl("stop", stopped).returncode == 0

    planned = node.cli("plan", "--unit", instance)
    assert planned.returncode == 0, planned
    assert planned.result["unit"] == instance and planned.result["max_total_num_tokens"] == 209007, planned.result
    assert any(r["current"] and r["mem_fraction_static"] == 0.94 for r in planned.result["plan"]["rows"]), (
        planned.result
    )

    benched = node.cli("bench", "--unit", instance, "--contexts", "1k", "--gen", "4")
    assert benched.returncode == 0, benched
    assert benched.result["unit"] == instance
    assert [p["status"] for p in benched.result["points"]] == ["ok"], benched.result
    # stopped (failed after sglang < 0.5.23's self-SIGKILL at the end of its drain), never started again
    assert node.show("ActiveState", unit=stopped)["ActiveState"] in ("inactive", "failed")


def _three_instances(node: Node) -> list[tuple[str, int]]:
    """sglang@PORT of one template, three of them running; the canary (the node's port) first."""
    ports = [node.port]
    while len(ports) < 3:
        port = free_port(node.host.address)
        if port not in ports:
            ports.append(port)
    node.install(_template(node), name=TEMPLATE, start=False)
    units = [(f"sglang@{port}.service", port) for port in ports]
    for unit, port in units:
        assert node.host.systemctl("start", unit).returncode == 0
        dataclasses.replace(node, port=port).wait_healthy(unit)
    canary, others = units[0], sorted(units[1:])  # the roll's order: the canary, then the others by name
    return [canary, *others]


def _fraction(node: Node, unit: str) -> str:
    argv = node.server_argv(unit)
    return argv[argv.index("--mem-fraction-static") + 1]


def test_all_instances_rolls_back_when_the_second_fails_then_rolls_through_all_three(node: Node) -> None:
    """Issue 24's acceptance: the template changed once, the instances restarted canary first; the second
    instance cannot start on the new bytes (the stand-in fails only for its port with 0.93), so the template
    is put back and the canary and the second restarted on the old bytes; the third was never touched. Then,
    with nothing failing, the same run rolls through all three."""
    (canary, _), (second, second_port), (third, _) = _three_instances(node)
    template_sha = node.sha(TEMPLATE_PATH)
    before = node.show(*SIBLING_PROPS, unit=third)
    before_argv = _argv(before.pop("ExecStart"))
    canary_pid = node.show("MainPID", unit=canary)["MainPID"]

    dry = node.cli("oom", "--unit", canary, "--dry-run", "--all-instances")
    assert dry.returncode == 0 and f"+++ b{TEMPLATE_PATH}" in dry.result["diff"], dry
    assert f"--all-instances: a real run restarts, in turn: {canary}, {second}, {third}" in dry.result["notes"], dry

    # Deterministic: only the second instance's new command line (its port, then the new fraction) fails.
    match = f"--port {second_port} --mem-fraction-static 0.93"
    node.host.set_standin(**FAST_KNOBS, failure="exit_at_once", failure_match=match)
    run = node.cli("oom", "--unit", canary, "--wait-timeout", "60", "--all-instances")
    assert run.returncode == 1 and run.result["outcome"] == "rolled_back", run
    outcomes = {i["unit"]: i["outcome"] for i in run.result["instances"]}
    assert outcomes == {canary: "rolled_back", second: "rolled_back", third: "not_restarted"}, run.result
    assert f"{second} did not come up on the new {TEMPLATE}" in run.result["error"], run.result["error"]
    assert f"restarted on the old bytes: {second}, {canary}" in run.result["error"], run.result["error"]
    assert node.sha(TEMPLATE_PATH) == template_sha
    assert len(node.backups(TEMPLATE_PATH)) == 1
    for unit in (canary, second):
        assert _fraction(node, unit) == "0.94", unit
        assert node.show("ActiveState", unit=unit)["ActiveState"] == "active"
    assert node.show("MainPID", unit=canary)["MainPID"] != canary_pid
    after = node.show(*SIBLING_PROPS, unit=third)
    assert _argv(after.pop("ExecStart")) == before_argv and after == before, "the third must not be restarted"
    assert any("No CUDA GPUs are available" in line for line in node.journal(second))

    # An instance that is not running is never started: a fourth one, started once and stopped.
    stopped = f"sglang@{free_port(node.host.address)}.service"
    assert node.host.systemctl("start", stopped).returncode == 0
    assert node.host.systemctl("stop", stopped).returncode == 0
    node.host.set_standin(**FAST_KNOBS)
    run = node.cli("oom", "--unit", canary, "--wait-timeout", "60", "--all-instances")
    assert run.returncode == 0 and run.result["outcome"] == "remediated", run
    outcomes = [(i["unit"], i["outcome"]) for i in run.result["instances"] if i["unit"] != stopped]
    assert outcomes == [(canary, "remediated"), (second, "remediated"), (third, "remediated")], run.result
    assert {i["outcome"] for i in run.result["instances"] if i["unit"] == stopped} <= {"not_running"}
    # stopped (failed after sglang < 0.5.23's self-SIGKILL at the end of its drain), never started again
    assert node.show("ActiveState", unit=stopped)["ActiveState"] in ("inactive", "failed")
    assert all(i["max_total_num_tokens"] == 195011 for i in run.result["instances"][:3]), run.result
    for unit in (canary, second, third):
        assert _fraction(node, unit) == "0.93", unit
        assert node.show("DropInPaths", unit=unit)["DropInPaths"] == ""
    after = node.show("MainPID", "InvocationID", unit=third)
    assert after["MainPID"] != before["MainPID"] and after["InvocationID"] != before["InvocationID"]

    # rollback --all-instances: the template's backup restored once, the three restarted on it in turn.
    back = node.cli("rollback", "--unit", canary, "--wait-timeout", "60", "--all-instances")
    assert back.returncode == 0 and back.result["outcome"] == "restored", back
    restored = [i["outcome"] for i in back.result["instances"] if i["unit"] != stopped]
    assert restored == ["restored"] * 3, back.result
    # stopped (failed after sglang < 0.5.23's self-SIGKILL at the end of its drain), never started again
    assert node.show("ActiveState", unit=stopped)["ActiveState"] in ("inactive", "failed")
    assert node.sha(TEMPLATE_PATH) == template_sha
    assert [_fraction(node, unit) for unit in (canary, second, third)] == ["0.94"] * 3
