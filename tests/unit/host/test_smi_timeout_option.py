"""`--smi-timeout`: the bound on each nvidia-smi query of the crash evidence reaches the host's script (oom's
locked read, oom --dry-run's read, diagnose's read), and the note of a hung driver names that bound."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from remediate import api
from remediate.cli.app import cli
from remediate.core.unitfile.edit import DesiredState, SourceFile, UnitSources, plan_edit
from remediate.fleet.request import OomRequest
from remediate.host.common.options import RunOptions
from remediate.host.oom.runner import remediate_host
from tests.support.fake_transport import FakeTransport
from tests.support.hosts import INCIDENT, smi_timeout_host
from tests.support.hosts import UNIT_PATH as PATH


def _remediated() -> str:
    sources = UnitSources(fragment=SourceFile(path=PATH, text=INCIDENT), env_files={})
    return plan_edit(sources, DesiredState(), now=datetime.now(tz=UTC)).files[0].new_text


def _scripts(fake: FakeTransport) -> str:
    """Every script the host was sent: on stdin (plain reads) or as the held command (the locked read)."""
    return "\n".join([c.stdin or "" for c in fake.calls] + fake.held)


@pytest.mark.parametrize(("given", "bound"), [(None, 10), (3, 3)])
def test_diagnose_sends_the_bound_and_names_it_in_the_note(given: int | None, bound: int) -> None:
    fake = smi_timeout_host()
    (result,) = api.diagnose(
        api.DiagnoseRequest(targets=("gpu-01",), smi_timeout=given), transport_factory=lambda entry, ssh: fake
    )
    script = _scripts(fake)
    assert f"timeout -k 2 {bound} nvidia-smi --query-gpu=" in script, script
    assert f"timeout -k 2 {bound} nvidia-smi --query-compute-apps=" in script
    assert f"nvidia-smi timed out (no answer within {bound} s; a hung GPU driver?)" in " ".join(result.notes)


def test_oom_dry_run_sends_the_bound_in_its_evidence_read() -> None:
    fake = smi_timeout_host()
    request = OomRequest(targets=("gpu-01",), dry_run=True, smi_timeout=4)
    (result,) = api.remediate_oom(request, transport_factory=lambda entry, ssh: fake).results
    assert "timeout -k 2 4 nvidia-smi --query-gpu=" in _scripts(fake)
    assert "timeout -k 2 10 nvidia-smi" not in _scripts(fake)
    assert any("no answer within 4 s" in note for note in result.notes), result.notes


def test_oom_sends_the_bound_in_its_locked_read() -> None:
    """A real run reads under the unit's lock (here an already remediated, healthy unit: nothing to commit)."""
    fake = smi_timeout_host(_remediated())
    fake.http("/server_info", (200, json.dumps({"max_total_num_tokens": 195011, "chunked_prefill_size": 4096})))
    result = remediate_host(fake, RunOptions(smi_timeout=4))
    assert result.outcome == "unchanged", result
    (held,) = fake.held
    assert "timeout -k 2 4 nvidia-smi --query-gpu=" in held and "timeout -k 2 10 nvidia-smi" not in held
    assert any("no answer within 4 s" in note for note in result.notes), result.notes


@pytest.mark.parametrize("command", ["oom", "diagnose"])
def test_the_cli_takes_the_option_within_its_range(command: str) -> None:
    runner = CliRunner()
    assert "--smi-timeout" in runner.invoke(cli, [command, "--help"]).output
    for bad in ("0", "31"):
        refused = runner.invoke(cli, shlex.split(f"{command} gpu-01 --smi-timeout {bad}"))
        assert refused.exit_code == 2 and "--smi-timeout" in refused.output, refused.output
