"""`oom --all-instances` on a scripted host: the template's change through the canary's transaction, then
each running sibling restarted in turn; a sibling that fails puts the old bytes back (host/instances/instances.py)."""

from __future__ import annotations

import json

import pytest

from remediate.models import CommandResult, HostResult
from tests.support.fake_transport import FakeTransport, exec_start_value, probe_output, state_output
from tests.support.hosts import (
    COMMIT,
    EPOCH,
    INCIDENT,
    JOURNAL,
    OOM_JOURNAL,
    POLL,
    commit_ok,
    incident_host,
    info,
    written_texts,
)
from tests.support.hosts import KIMI_ARGV as ARGV
from tests.support.hosts import oom_host as make_host
from tests.support.hosts import run_oom as run
from tests.support.output import printed as _printed

TEMPLATE = "/etc/systemd/system/sglang@.service"
TEXT = INCIDENT.replace("--port 30000", "--port %i")
CANARY, SECOND, THIRD, STOPPED = (f"sglang@{p}.service" for p in (30000, 30001, 30002, 30003))
LISTING = "".join(
    f"@@instance {unit} loaded {state}\n"
    for unit, state in (
        (CANARY, "failed failed"),
        (SECOND, "active running"),
        (THIRD, "active running"),
        (STOPPED, "inactive dead"),
    )  # fmt: skip
)
RESTART_ONLY = f"@@reloaded\n@@restart {EPOCH}\n@@restarted inv-2\n@@end\n"  # a commit with nothing to write


def _probe(unit: str, active: str, dropin: str | None = None) -> str:
    port = unit.split("@")[1].split(".")[0]
    argv = [port if word == "30000" else word for word in ARGV]
    shown: dict[str, str | int] = {
        "FragmentPath": TEMPLATE,
        "DropInPaths": "",
        "ExecStart": exec_start_value(argv),
        "EnvironmentFiles": "",
        "NeedDaemonReload": "no",
        "ActiveState": active,
        "SubState": "running" if active == "active" else "dead",
        "Result": "success",
        "NRestarts": 0,
        "MainPID": 4242 if active == "active" else 0,
        "InvocationID": "inv-1",
        "Environment": "HF_HOME=/models/.cache/huggingface CUDA_HOME=/usr/local/cuda",
    }
    files = {TEMPLATE: TEXT}
    if dropin is not None:  # the instance's own drop-in, which sets the values itself
        shown["DropInPaths"] = path = f"/etc/systemd/system/{unit}.d/90-remediate-oom.conf"
        files[path] = dropin
    return probe_output(unit, shown, files, candidates=[unit])


def _host(*commits: str | CommandResult, own: dict[str, str] | None = None) -> FakeTransport:
    """``own``: an instance's own drop-in (by unit)."""
    host = FakeTransport("gpu-01")
    host.on("# remediate oom --all-instances", "@@locked\n" + LISTING + "@@end\n")
    for unit, active in ((SECOND, "active"), (THIRD, "active"), (STOPPED, "inactive")):
        answer = _probe(unit, active, (own or {}).get(unit))
        host.on(rf"# remediate probe[\s\S]*\nunit={unit.replace('.', '[.]')}\n", answer)
    host.on(r"# remediate probe", _probe(CANARY, "failed"))
    host.on(JOURNAL, OOM_JOURNAL + "\n")
    host.on(COMMIT, *commits)
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", info(195011))
    return host


def _commits(host: FakeTransport) -> list[tuple[str, dict[str, str]]]:
    """Each commit script's unit and what it writes."""
    out = []
    for script in host.scripts("# remediate commit"):
        unit = next(line.split("=", 1)[1] for line in script.splitlines() if line.startswith("unit="))
        out.append((unit, written_texts(script) if "paths=( '" in script or "paths=( /" in script else {}))
    return out


def _outcomes(result: HostResult) -> dict[str, str]:
    return {i.unit: i.outcome for i in result.instances or ()}


def test_the_template_changes_once_and_every_running_instance_restarts_in_turn() -> None:
    host = _host(commit_ok(TEMPLATE), RESTART_ONLY)
    result = run(host, unit=CANARY, all_instances=True)
    assert result.outcome == "remediated", result.error
    assert [(i.unit, i.outcome) for i in result.instances or ()] == [
        (CANARY, "remediated"),
        (SECOND, "remediated"),
        (THIRD, "remediated"),
        (STOPPED, "not_running"),
    ]
    assert all(i.max_total_num_tokens == 195011 for i in (result.instances or ())[:3])
    commits = _commits(host)
    assert [unit for unit, _ in commits] == [CANARY, SECOND, THIRD]  # the stopped one is never started
    [(path, text)] = commits[0][1].items()
    assert path == TEMPLATE and "--mem-fraction-static 0.93" in text and "--port %i" in text
    assert commits[1][1] == commits[2][1] == {}
    assert sorted(h.split("unit=")[1].split("\n")[0] for h in host.held if "unit=sglang@3000" in h) == [
        CANARY, SECOND, THIRD, STOPPED
    ]  # fmt: skip
    assert any("# remediate oom --all-instances" in h for h in host.held)
    assert {(c.port) for c in host.http_calls} == {30000, 30001, 30002}  # each instance on its own port
    assert host.holding == 0


def test_a_failed_second_instance_puts_the_old_bytes_back_and_restarts_the_canary_on_them() -> None:
    failed = CommandResult("bash -s", 1, "@@reloaded\n@@failed systemctl restart\n", "@@error restart exit 1\n")
    host = _host(commit_ok(TEMPLATE), failed, commit_ok(TEMPLATE, backup=False), RESTART_ONLY)
    result = run(host, unit=CANARY, all_instances=True)
    assert result.outcome == "rolled_back" and result.exit_code == 1
    assert _outcomes(result) == {CANARY: "rolled_back", SECOND: "rolled_back", THIRD: "not_restarted",
                                 STOPPED: "not_restarted"}  # fmt: skip
    assert result.error is not None
    assert f"{SECOND} did not come up on the new sglang@.service" in result.error
    assert f"restarted on the old bytes: {SECOND}, {CANARY}" in result.error
    commits = _commits(host)
    assert [unit for unit, _ in commits] == [CANARY, SECOND, SECOND, CANARY]
    assert commits[2][1] == {TEMPLATE: TEXT}  # the undo: the template's old bytes, with the failed instance
    assert "rollback" in [p.name for p in result.phases]


def test_an_undo_that_cannot_write_restarts_nothing_else() -> None:
    """The template's old bytes could not be put back: no instance is restarted on a template in doubt."""
    failed = CommandResult("bash -s", 1, "@@reloaded\n@@failed systemctl restart\n", "@@error restart exit 1\n")
    conflict = CommandResult("bash -s", 76, "", "@@error conflict the template changed since it was read\n")
    host = _host(commit_ok(TEMPLATE), failed, conflict)
    result = run(host, unit=CANARY, all_instances=True)
    assert result.outcome == "failed" and result.error is not None
    assert "the rollback failed too" in result.error and "changed since it was read" in result.error
    assert [unit for unit, _ in _commits(host)] == [CANARY, SECOND, SECOND]
    assert _outcomes(result)[CANARY] == "remediated"


def test_an_instance_that_does_not_come_up_on_the_old_bytes_either_fails_the_host() -> None:
    failed = CommandResult("bash -s", 1, "@@reloaded\n@@failed systemctl restart\n", "@@error restart exit 1\n")
    host = _host(commit_ok(TEMPLATE), failed, commit_ok(TEMPLATE, backup=False), failed)
    result = run(host, unit=CANARY, all_instances=True)
    assert result.outcome == "failed" and result.exit_code == 1
    assert _outcomes(result)[CANARY] == "failed" and _outcomes(result)[SECOND] == "rolled_back"
    assert result.error is not None and f"did not come up on the old bytes either: {CANARY}" in result.error


def test_no_rollback_leaves_the_new_bytes_and_says_which_instances_run_on_them() -> None:
    failed = CommandResult("bash -s", 1, "@@reloaded\n@@failed systemctl restart\n", "@@error restart exit 1\n")
    host = _host(commit_ok(TEMPLATE), failed)
    result = run(host, unit=CANARY, all_instances=True, rollback=False)
    assert result.outcome == "failed"
    assert result.error is not None and f"--no-rollback: the new bytes stay ({CANARY} run on them)" in result.error
    assert len(_commits(host)) == 2


def test_the_canary_failing_is_the_one_host_transaction_undo_and_nothing_else_restarts() -> None:
    host = _host(commit_ok(TEMPLATE), commit_ok(TEMPLATE, invocation="inv-3", backup=False))
    host.on(POLL, state_output("failed", "failed", result="exit-code", invocation_id="inv-2", main_pid=0))
    host._rules.insert(0, host._rules.pop())  # this poll answer first  # noqa: SLF001
    host.http("/health", None)
    result = run(host, unit=CANARY, all_instances=True, timeout=5)
    assert result.outcome in ("rolled_back", "failed"), result.error
    assert set(_outcomes(result).values()) <= {"rolled_back", "failed", "not_restarted"}
    assert _outcomes(result)[SECOND] == _outcomes(result)[THIRD] == "not_restarted"
    assert [unit for unit, _ in _commits(host)] == [CANARY, CANARY]


@pytest.mark.parametrize("flag", [False, True])
def test_dry_run_shows_the_template_diff_only_with_the_flag(flag: bool) -> None:
    host = _host(commit_ok(TEMPLATE))
    result = run(host, unit=CANARY, all_instances=flag, dry_run=True)
    assert result.error is None
    dropin = f"/etc/systemd/system/{CANARY}.d/90-remediate-oom.conf"
    assert (f"+++ b{TEMPLATE}" in result.diff) is flag and (f"+++ b{dropin}" in result.diff) is not flag
    roll = (
        f"--all-instances: a real run restarts, in turn: {CANARY}, {SECOND}, {THIRD}; "
        f"not running, never started: {STOPPED}"
    )
    assert (roll in result.notes) is flag, result.notes
    assert not any("oom --all-instances" in h for h in host.held)  # the dry run's listing takes no lock
    assert not host.scripts("# remediate commit")


def test_a_shared_environment_file_is_refused_naming_it_and_the_flag_then_planned_with_it() -> None:
    env = "SGLANG_ARGS=--model-path /m --mem-fraction-static 0.9\n"
    text = (
        "[Service]\nEnvironmentFile=/etc/default/sglang\n"
        "ExecStart=/opt/venv/bin/python3 -m sglang.launch_server $SGLANG_ARGS\n"
    )
    argv = ["/opt/venv/bin/python3", "-m", "sglang.launch_server", "$SGLANG_ARGS"]

    def host() -> FakeTransport:
        fake = incident_host(text=text, unit=CANARY, path=TEMPLATE, argv=argv, active="active", MainPID=42,
                             files={"/etc/default/sglang": env})  # fmt: skip
        fake.http("/server_info", (200, '{"max_total_num_tokens": 1000}'))
        fake.on("# remediate oom --all-instances", "@@end\n")  # the dry run's listing: no instance loaded
        return fake

    refused = run(host(), unit=CANARY)
    assert refused.exit_code == 2 and refused.error is not None
    assert refused.error.startswith(f"/etc/default/sglang: {CANARY} is an instance of a template: changing "
                                    "/etc/default/sglang changes every instance")  # fmt: skip
    assert "pass --all-instances to change it once and restart every running instance in turn" in refused.error
    planned = run(host(), unit=CANARY, all_instances=True, dry_run=True)
    assert planned.error is None and "+++ b/etc/default/sglang" in planned.diff, planned.diff
    assert f"--all-instances: a real run restarts, in turn: {CANARY}" in planned.notes


def test_the_report_and_the_json_list_every_instance() -> None:
    result = run(_host(commit_ok(TEMPLATE), RESTART_ONLY), unit=CANARY, all_instances=True)
    shown = _printed([result], dry_run=False)
    assert f"instance  {SECOND}: remediated, max_total_num_tokens=195,011" in shown
    assert f"instance  {STOPPED}: not_running\n" in shown
    document = json.loads(shown[shown.index("{") :])
    [host] = document["results"] if "results" in document else document["hosts"]
    assert [i["outcome"] for i in host["instances"]] == ["remediated"] * 3 + ["not_running"]


def test_a_change_of_the_units_own_files_restarts_it_alone() -> None:
    """--all-instances on a plain unit (or an instance whose own files hold the flags): the one-host run."""
    host = make_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", info(195011))
    result = run(host, all_instances=True)
    assert result.outcome == "remediated" and result.instances is None
    assert "--all-instances: the change is sglang.service's own; no other unit is restarted" in result.notes
    assert not any("# remediate oom --all-instances" in h for h in host.held)


def test_an_instance_whose_own_dropin_sets_the_values_is_not_restarted() -> None:
    """The template's change does not reach an instance whose own drop-in sets every value it changes (the
    command line and the alloc conf): it is left running (``unchanged``), the others are restarted."""
    line = next(line for line in TEXT.splitlines() if line.startswith("ExecStart="))
    own = (
        "[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nExecStart=\n"
        f"{line} --mem-fraction-static 0.9 --chunked-prefill-size 2048\n"
    )
    host = _host(commit_ok(TEMPLATE), RESTART_ONLY, own={SECOND: own})
    result = run(host, unit=CANARY, all_instances=True)
    assert result.outcome == "remediated", result.error
    assert _outcomes(result) == {CANARY: "remediated", SECOND: "unchanged", THIRD: "remediated",
                                 STOPPED: "not_running"}  # fmt: skip
    assert [unit for unit, _ in _commits(host)] == [CANARY, THIRD]
