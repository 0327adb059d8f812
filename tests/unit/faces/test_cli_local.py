"""`--local`: this machine is the host. With a TARGET or a remote host's option it is bad input (exit 2, one
line, before anything runs); the api's local target reads no inventory; a --local run never imports paramiko."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from remediate import api
from remediate.cli.app import cli
from remediate.errors import ConfigError
from remediate.fleet.settings import LocalTarget, resolve_hosts
from remediate.transport.local import LocalTransport

COMMANDS = ["oom", "rollback", "status", "diagnose", "bench", "plan", "backups"]
REMOTE = [
    (["gpu-01"], "give no TARGET (got gpu-01)"),
    (["-i", "inventory.yaml"], "not with -i/--inventory, it is for remote hosts"),
    (["--identity", "key"], "not with --identity, it is for remote hosts"),
    (["--known-hosts", "kh"], "not with --known-hosts, it is for remote hosts"),
    (["--accept-new-host-key"], "not with --accept-new-host-key, it is for remote hosts"),
    (["--connect-timeout", "5"], "not with --connect-timeout, it is for remote hosts"),
    (["--ssh-config", "cfg"], "not with --ssh-config, it is for remote hosts"),
    (["--sudo"], "not with --sudo, it is for remote hosts"),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("extra", "message"), REMOTE, ids=[r[0][0] for r in REMOTE])
def test_local_with_a_target_or_a_remote_option_is_bad_input(
    command: str, extra: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_host() -> None:
        raise AssertionError("no host may be reached on bad input")

    monkeypatch.setattr(api, "local_host", no_host)  # fault injection: proves the refusal comes first
    result = CliRunner().invoke(cli, [command, "--local", *extra])
    assert result.exit_code == 2, result.output
    assert result.output == f"remediate: --local works on this machine: {message}\n"


def test_plan_offline_with_local_is_bad_input() -> None:
    result = CliRunner().invoke(cli, ["plan", "--local", "--offline"])
    assert (result.exit_code, result.output.count("\n")) == (2, 1)
    assert "--local has no meaning" in result.output


def test_the_local_target_is_this_machine_named_by_its_hostname_and_reads_no_inventory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "inventory.yaml").write_text("hosts:\n  gpu-01: {}\n")  # would be read for a plain name
    monkeypatch.chdir(tmp_path)
    targets, factory = api.local_host()
    assert targets == (socket.gethostname(),) and isinstance(targets[0], LocalTarget)
    inventory, hosts = resolve_hosts(targets, None)
    assert inventory is None and [h.name for h in hosts] == [socket.gethostname()]
    transport = factory(hosts[0], api.SSHOptions())
    assert isinstance(transport, LocalTransport) and transport.host == socket.gethostname()
    with pytest.raises(ConfigError, match="--local is this machine alone"):
        resolve_hosts((*targets, "gpu-01"), None)
    with pytest.raises(ConfigError, match="--local is this machine alone"):
        resolve_hosts(targets, "inventory.yaml")


def test_a_local_run_names_this_machine_and_never_imports_paramiko(tmp_path: Path) -> None:
    # Read-only, on this machine: whether or not it runs an sglang unit, the result names it and no SSH
    # library is loaded on the way.
    code = (
        "import sys; from click.testing import CliRunner; from remediate.cli.app import cli\n"
        "r = CliRunner().invoke(cli, ['status', '--local', '--json'])\n"
        "assert 'paramiko' not in sys.modules and 'fabric' not in sys.modules, 'ssh imported'\n"
        "print(r.output)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, cwd=tmp_path
    ).stdout
    assert [r["host"] for r in json.loads(out)["results"]] == [socket.gethostname()]
