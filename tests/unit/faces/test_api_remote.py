"""`oom`, `status`, `backups` and `rollback` through the Python API with a FakeTransport factory injected.

The API takes the transport factory as a parameter (``transport_factory``); the CLI passes none and gets
SSH (its remote commands are tested end to end against sandbox hosts in tests/e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediate import api
from remediate.cli.render import console as render_console
from remediate.fleet.request import OomRequest
from remediate.models import HostResult
from remediate.transport.base import SSHOptions
from tests.support.hosts import INCIDENT, incident_host
from tests.support.hosts import OneHost as Factory
from tests.support.hosts import serving_host as host


def document(results: list[HostResult], **extra: object) -> dict[str, object]:
    """What `--json` prints, round-tripped through JSON."""
    return json.loads(render_console.dumps(render_console.results_document(results, **extra)))  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./inventory.yaml, and retry files land in tmp


def test_oom_dry_run_changes_nothing() -> None:
    fake = host(INCIDENT)
    factory = Factory(fake)
    rollout = api.remediate_oom(
        OomRequest(targets=("root@gpu-01",), dry_run=True, ssh=SSHOptions(sudo=True)), transport_factory=factory
    )
    assert api.exit_code(rollout.results) == 0 and rollout.retry_file is None
    [(entry, options)] = factory.seen
    assert entry.name == "root@gpu-01" and options.sudo is True and options.user == "root"
    [result] = document(rollout.results, **rollout.extra())["results"]  # type: ignore[misc]
    assert result["outcome"] == "unchanged" and result["changed"] is True and result["dry_run"] is True
    assert result["flags"] == {
        "before": {"mem_fraction_static": "0.94", "chunked_prefill_size": None},
        "after": {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"},
    }
    assert result["env"]["after"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert "+Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in result["diff"]
    assert any("systemctl restart sglang.service" in step for step in result["steps"])
    assert not fake.scripts("# remediate commit")


def test_the_high_level_oom_function_takes_the_factory_too() -> None:
    fake = host(INCIDENT)
    request = api.OomRequest(
        targets=("root@gpu-01",), dry_run=True, desired=api.desired_args(mem_fraction_static="0.9")
    )
    rollout = api.remediate_oom(request, transport_factory=Factory(fake))
    [result] = rollout.results
    assert result.outcome == "unchanged" and result.flags_after["mem_fraction_static"] == "0.9"
    assert not fake.scripts("# remediate commit")


def test_status_reports_remediated_false_and_tokens() -> None:
    results = api.status(api.StatusRequest(targets=("root@gpu-01",)), transport_factory=Factory(host(INCIDENT)))
    assert api.exit_code(results) == 0
    [result] = document(results)["results"]  # type: ignore[misc]
    assert result["remediated"] is False and result["max_total_num_tokens"] == 209007
    assert result["active_state"] == "active"


def test_status_names_the_aiter_factor() -> None:
    fake = incident_host(active="active", MainPID=42)
    # the incident's unit writes 0.94; sglang 0.5.23 on ROCm with aiter runs it at 0.94 * 0.85
    info = {"max_total_num_tokens": 209007, "mem_fraction_static": 0.94 * 0.85, "attention_backend": "aiter"}
    fake.http("/server_info", (200, json.dumps(info)))
    [result] = api.status(api.StatusRequest(targets=("root@gpu-01",)), transport_factory=Factory(fake))
    assert result.ok, result.notes
    assert any("runs --mem-fraction-static 0.94 as 0.799" in note and "0.85" in note for note in result.notes)
    assert not result.warnings and not any(c.command.startswith("journalctl") for c in fake.calls)


def test_backups_without_any_lists_none() -> None:
    [result] = api.backups(api.BackupsRequest(targets=("root@gpu-01",)), transport_factory=Factory(host(INCIDENT)))
    assert result.ok and result.backup_listing is not None and result.backup_listing.rows == ()


def test_rollback_without_backups_is_a_clear_failure() -> None:
    rollout = api.rollback(api.RollbackRequest(targets=("root@gpu-01",)), transport_factory=Factory(host(INCIDENT)))
    assert api.exit_code(rollout.results) == 2
    [result] = document(rollout.results)["results"]  # type: ignore[misc]
    assert result["outcome"] == "failed" and "no backups found" in result["error"]
