"""Issue 14, safety defaults: nothing is touched unless named, safety options never come from the
environment, one meaning per timeout flag, retry files only for inventory rollouts (in the state dir)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from remediate import api
from remediate.cli import cli
from remediate.cli.flags import pick_timeout
from remediate.errors import ConfigError
from remediate.fleet.request import OomRequest
from remediate.fleet.settings import resolve_hosts
from tests.support import hosts
from tests.support.fake_transport import FakeTransport
from tests.support.hosts import incident_host

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventory.yaml"
DOC_NETS = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")]


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner(env=env).invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def in_example_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "inventory.yaml").write_text(EXAMPLE.read_text())
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", ["oom", "rollback", "status", "backups"])
def test_no_target_with_an_inventory_is_refused(in_example_dir: Path, command: str) -> None:
    code, out, err = invoke(command)
    assert code == 2 and out == ""
    assert err == "remediate: inventory.yaml: name the hosts: a host, a group, a glob or `all`\n"


def test_no_target_with_an_explicit_inventory_is_refused(in_example_dir: Path) -> None:
    with pytest.raises(ConfigError, match="name the hosts"):
        resolve_hosts((), "inventory.yaml")
    _, hosts = resolve_hosts(("all",), "inventory.yaml")
    assert [h.name for h in hosts] == ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-b01", "gpu-b02"]


def test_example_inventory_uses_documentation_addresses_only() -> None:
    hosts = yaml.safe_load(EXAMPLE.read_text())["hosts"]
    for name, entry in hosts.items():
        address = str(entry["address"])
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            assert address.endswith(".example") or ".example." in address, (name, address)
        else:
            assert any(ip in net for net in DOC_NETS), (name, address)


@pytest.mark.parametrize(
    ("variable", "flag"),
    [
        ("REMEDIATE_OOM_NO_ROLLBACK", "--no-rollback"),
        ("REMEDIATE_OOM_ACCEPT_NEW_HOST_KEY", "--accept-new-host-key"),
        ("REMEDIATE_OOM_YES", "--yes"),
        ("REMEDIATE_ROLLBACK_YES", "--yes"),
        ("REMEDIATE_STATUS_ACCEPT_NEW_HOST_KEY", "--accept-new-host-key"),
        ("REMEDIATE_OOM_ALLOW_RAISE", "--allow-raise"),
    ],
)
def test_safety_options_are_refused_from_the_environment(variable: str, flag: str) -> None:
    code, out, err = invoke("oom", "root@gpu-01.example", "--dry-run", env={variable: "1"})
    assert code == 2 and out == ""
    assert err == f"remediate: {variable} is set: safety options are never read from the environment; pass {flag}\n"


def test_other_options_still_come_from_the_environment(in_example_dir: Path) -> None:
    code, _, err = invoke("oom", env={"REMEDIATE_OOM_WAIT_TIMEOUT": "0"})
    assert code == 2 and "--wait-timeout" in err  # read (and validated) from the environment


def test_timeout_flags_have_one_meaning() -> None:
    for command, flags in {
        "oom": ["--connect-timeout", "--wait-timeout", "--lock-timeout", "--smi-timeout"],
        "rollback": ["--connect-timeout", "--wait-timeout", "--lock-timeout"],
        "status": ["--connect-timeout"],
        "diagnose": ["--connect-timeout", "--smi-timeout"],
        "backups": ["--connect-timeout", "--lock-timeout"],
    }.items():
        _, out, _ = invoke(command, "--help")
        shown = set(re.findall(r"--[a-z]+-timeout|--timeout\b", out))
        assert shown == set(flags), (command, shown)


def test_deprecated_timeout_alias() -> None:
    assert pick_timeout(30.0, None, "wait_timeout", 900.0) == (
        30.0,
        "--timeout is deprecated here; use --wait-timeout",
    )
    assert pick_timeout(None, 5.0, "wait_timeout", 900.0) == (5.0, None)
    assert pick_timeout(None, None, "connect_timeout", 10.0) == (10.0, None)
    with pytest.raises(ConfigError, match="give only --wait-timeout"):
        pick_timeout(1.0, 2.0, "wait_timeout", 900.0)


def _failing_host() -> FakeTransport:
    """A host whose commit finds the unit changed under it (CAS, exit 76): the run fails, nothing written."""
    fake = hosts.serving_host(hosts.INCIDENT)
    fake.on(hosts.COMMIT, hosts.commit_error(76, f"conflict {hosts.UNIT_PATH} changed since it was read"))
    return fake


def test_no_retry_file_for_an_ad_hoc_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fake = _failing_host()
    rollout = api.remediate_oom(OomRequest(targets=("root@gpu-01",)), transport_factory=hosts.OneHost(fake))
    assert rollout.results[0].outcome == "failed"
    assert rollout.retry_file is None and list(tmp_path.iterdir()) == []


def test_retry_file_of_an_inventory_rollout_goes_to_the_state_dir(
    in_example_dir: Path, _state_dir: Path, tmp_path: Path
) -> None:
    rollout = api.remediate_oom(
        OomRequest(targets=("gpu-a01",), inventory="inventory.yaml"),
        transport_factory=hosts.OneHost(_failing_host()),
    )
    assert rollout.retry_file is not None
    retry = Path(rollout.retry_file)
    assert retry.parent == _state_dir / "retry" and retry.name.startswith("remediate-retry-")
    assert yaml.safe_load(retry.read_text())["hosts"].keys() == {"gpu-a01"}
    assert sorted(p.name for p in in_example_dir.iterdir()) == ["inventory.yaml"]
    explicit = tmp_path / "again.yaml"
    rollout = api.remediate_oom(
        OomRequest(targets=("gpu-a01",), inventory="inventory.yaml", retry_file=str(explicit)),
        transport_factory=hosts.OneHost(_failing_host()),
    )
    assert rollout.retry_file == str(explicit) and explicit.is_file()


TEMPLATE = "/etc/systemd/system/sglang@.service"
TEMPLATE_UNIT = (
    "[Service]\nEnvironmentFile=/etc/sglang/%i.env\n"
    "ExecStart=/opt/venv/bin/python3 -m sglang.launch_server $SGLANG_ARGS --port 300%i\n"
)


def _instance_host(text: str, env: str) -> FakeTransport:
    argv = ["/opt/venv/bin/python3", "-m", "sglang.launch_server", "$SGLANG_ARGS"]
    fake = incident_host(
        text=text,
        unit="sglang@a.service",
        path=TEMPLATE,
        argv=argv,
        active="active",
        MainPID=42,
        files={"/etc/sglang/a.env": env},
    )
    fake.http("/server_info", (200, '{"max_total_num_tokens": 1000}'))
    return fake


def test_a_template_change_for_one_instance_goes_into_its_own_dropin() -> None:
    """The alloc conf would be added to the template (shared by every instance): it is planned in the
    instance's drop-in instead (issue 24), and the template is not in the diff."""
    fake = _instance_host(TEMPLATE_UNIT, "SGLANG_ARGS=--model-path /m --mem-fraction-static 0.9\n")
    result = hosts.run_oom(fake, unit="sglang@a.service", dry_run=True)
    assert result.error is None and result.changed
    dropin = "/etc/systemd/system/sglang@a.service.d/90-remediate-oom.conf"
    assert f"+++ b{dropin}" in result.diff and f"+++ b{TEMPLATE}" not in result.diff
    assert "+ExecStart=\n" in result.diff and "--port 300%i" in result.diff
    assert not fake.scripts("# remediate commit")


def test_a_shared_environment_file_for_one_instance_is_refused() -> None:
    shared = TEMPLATE_UNIT.replace("/etc/sglang/%i.env", "/etc/default/sglang")
    argv = ["/opt/venv/bin/python3", "-m", "sglang.launch_server", "$SGLANG_ARGS"]
    env = "SGLANG_ARGS=--model-path /m --mem-fraction-static 0.9\n"
    fake = incident_host(text=shared, unit="sglang@a.service", path=TEMPLATE, argv=argv, active="active",
                         MainPID=42, files={"/etc/default/sglang": env})  # fmt: skip
    fake.http("/server_info", (200, '{"max_total_num_tokens": 1000}'))
    result = hosts.run_oom(fake, unit="sglang@a.service")
    assert result.outcome == "failed" and result.exit_code == 2
    assert result.error is not None and result.error.startswith(
        "/etc/default/sglang: sglang@a.service is an instance of a template: changing /etc/default/sglang "
        "changes every instance"
    )
    assert not fake.scripts("# remediate commit")


def test_an_instance_only_edit_goes_ahead() -> None:
    """Everything the plan changes belongs to this instance (its own EnvironmentFile): no refusal."""
    env = "SGLANG_ARGS=--model-path /m --mem-fraction-static 0.9 --chunked-prefill-size 4096\n"
    env += "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
    fake = _instance_host(TEMPLATE_UNIT, env)
    result = hosts.run_oom(fake, unit="sglang@a.service", dry_run=True)
    assert result.error is None and result.changed
    assert "/etc/sglang/a.env" in result.diff and TEMPLATE not in result.diff
