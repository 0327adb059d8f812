"""`oom`, `status`, `backups` and `rollback` through click with a FakeTransport injected via ctx.obj."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_transport import FakeTransport, exec_start_value, probe_output

from remediate.cli import cli
from remediate.fleet.inventory import HostEntry
from remediate.transport.base import SSHOptions

ROOT = Path(__file__).resolve().parents[2]
INCIDENT = (ROOT / "examples" / "incident" / "sglang.service").read_text()
PATH = "/etc/systemd/system/sglang.service"
ARGV = ["/opt/sglang/bin/python3", "-m", "sglang.launch_server", "--host", "0.0.0.0", "--port", "30000"]


def host(text: str, tokens: int = 209007) -> FakeTransport:
    props = {
        "FragmentPath": PATH,
        "DropInPaths": "",
        "ExecStart": exec_start_value(ARGV),
        "ActiveState": "active",
        "SubState": "running",
        "NeedDaemonReload": "no",
        "NRestarts": 0,
        "MainPID": 42,
    }
    fake = FakeTransport("gpu-01")
    fake.on(r"# remediate probe", probe_output("sglang.service", props, {PATH: text}, candidates=["sglang.service"]))
    fake.on(r"# remediate: list the backups", "@@end\n")
    fake.http("/server_info", (200, json.dumps({"max_total_num_tokens": tokens})))
    return fake


def invoke(args: list[str], fake: FakeTransport) -> tuple[int, str, str]:
    seen: list[tuple[HostEntry, SSHOptions]] = []

    def factory(entry: HostEntry, options: SSHOptions) -> FakeTransport:
        seen.append((entry, options))
        return fake

    result = CliRunner().invoke(cli, args, obj={"transport_factory": factory}, catch_exceptions=False)
    assert seen and seen[0][0].name == "root@gpu-01"
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./inventory.yaml, and retry files land in tmp


def test_oom_dry_run_json_changes_nothing() -> None:
    fake = host(INCIDENT)
    code, out, _ = invoke(["oom", "root@gpu-01", "--dry-run", "--json"], fake)
    assert code == 0
    doc = json.loads(out)
    [result] = doc["results"]
    assert result["outcome"] == "unchanged" and result["changed"] is True and result["dry_run"] is True
    assert result["flags"] == {
        "before": {"mem_fraction_static": "0.94", "chunked_prefill_size": None},
        "after": {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"},
    }
    assert result["env"]["after"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert "+Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in result["diff"]
    assert any("systemctl restart sglang.service" in step for step in result["steps"])
    assert not fake.scripts("# remediate commit")


def test_status_json_reports_remediated_false_and_tokens() -> None:
    code, out, _ = invoke(["status", "root@gpu-01", "--json"], host(INCIDENT))
    assert code == 0
    [result] = json.loads(out)["results"]
    assert result["remediated"] is False and result["max_total_num_tokens"] == 209007
    assert result["active_state"] == "active"


def test_backups_without_any_lists_none() -> None:
    code, out, _ = invoke(["backups", "root@gpu-01"], host(INCIDENT))
    assert code == 0 and "no backups" in out


def test_rollback_without_backups_is_a_clear_failure() -> None:
    code, out, _ = invoke(["rollback", "root@gpu-01", "--json"], host(INCIDENT))
    assert code == 2
    [result] = json.loads(out)["results"]
    assert result["outcome"] == "failed" and "no backups found" in result["error"]
