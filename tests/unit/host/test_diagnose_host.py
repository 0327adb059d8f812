"""`diagnose` and the `oom` evidence gate through the Python API, one scripted host (FakeTransport)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate import api
from remediate.errors import ConfigError
from remediate.host.diagnose.diagnose import masked, parse_since
from tests.support.hosts import INCIDENT
from tests.support.hosts import case_journal as journal
from tests.support.hosts import diagnose_host as host
from tests.support.hosts import diagnose_one as run


def test_incident_journal_gives_findings_recommendation_and_command() -> None:
    fake = host(
        journal("incident-kimi-tp8"), gpus=["0, 97250, 96900"], apps=["101, 95000", "555, 2048"], state="active"
    )
    result = run(fake)
    assert result["outcome"] == "unchanged" and result["error"] is None
    (finding,) = result["findings"]
    assert finding["kind"] == "cuda_oom_runtime" and finding["tried_bytes"] == 939524096
    rec = result["recommendation"]
    assert rec["chunked_prefill_size"] == 4096 and rec["alloc_conf"] == "expandable_segments:True"
    assert rec["mem_fraction_static"] == 0.94 and isinstance(rec["mem_fraction_static"], float)
    # a GPU process outside the server's tree is a neighbour: reported first, and `oom` would refuse
    assert rec["blocking"] is True and rec["command"] is None
    assert rec["reasons"][0].startswith("nvidia-smi: process 555 holds 2.00 GiB outside the server")
    # read-only and one round trip: only the probe ran, and it asked for the journal and nvidia-smi
    (call,) = fake.calls
    assert call.stdin is not None
    assert 'journalctl -u "$unit" -o short-iso --no-pager -q -n 2000' in call.stdin
    assert "--query-compute-apps=pid,used_memory,gpu_uuid " in call.stdin
    assert "--query-gpu=index,uuid,memory.total,memory.used " in call.stdin

    alone = run(host(journal("incident-kimi-tp8"), gpus=["0, 97250, 96900"], apps=["102, 95000"], state="active"))
    assert alone["foreign_gpu_processes"] == [] and alone["recommendation"]["blocking"] is False
    assert alone["recommendation"]["command"].startswith("remediate oom gpu-01 ")  # --unit as the inventory says
    assert alone["recommendation"]["command"].endswith(" --mem-fraction-static 0.94")


def test_since_time_is_quoted_into_the_script_and_restarts_cut_the_runs() -> None:
    fake = host(journal("stale-oom-then-good-start"))
    result = run(fake, since="2 hours ago", lines=50)
    assert "-n 50 --since '2 hours ago'" in (fake.calls[0].stdin or "")
    assert result["is_stale"] is True
    only_current = run(host(journal("stale-oom-then-good-start")), since="0")
    assert only_current["findings"] == [] and only_current["runs"] == 1


def test_absent_nvidia_smi_is_a_note_not_an_error() -> None:
    result = run(host(journal("not-enough-memory-0.5.23-tp8-at-0.75")))
    assert result["error"] is None
    assert any("nvidia-smi is not on this host" in n for n in result["notes"])
    assert result["recommendation"]["blocking"] is True
    assert result["recommendation"]["command"].endswith("--force")


@pytest.mark.parametrize("value", ["yesterday at noon", "-", "1.5", "2 fortnights"])
def test_bad_since_is_config_error_before_any_host(value: str) -> None:
    with pytest.raises(ConfigError, match="--since"):
        api.diagnose(
            api.DiagnoseRequest(targets=("gpu-01",), since=value),
            transport_factory=lambda e, s: pytest.fail("contacted a host"),
        )


def test_parse_since_forms() -> None:
    assert parse_since("3") == (3, None)
    assert parse_since("2026-12-01 08:00") == (None, "2026-12-01 08:00")
    assert parse_since("@1764576000") == (None, "@1764576000")
    assert parse_since("-30min") == (None, "-30min")
    assert parse_since(None) == (None, None)
    with pytest.raises(ConfigError):
        parse_since("1", lines=0)


def test_secrets_in_evidence_are_masked() -> None:
    assert (
        masked("server_args=ServerArgs(api_key='sk-live-1', port=1)") == "server_args=ServerArgs(api_key=***, port=1)"
    )
    assert "hunter2" not in masked("--api-key hunter2 HF_TOKEN=hunter2")


def test_oom_refuses_on_startup_not_enough_memory_and_changes_nothing(tmp_path: Path) -> None:
    fake = host(journal("not-enough-memory-0.5.23-tp8-at-0.75"))
    rollout = api.remediate_oom(
        api.OomRequest(targets=("gpu-01",)), transport_factory=lambda e, s: fake, retry_dir=str(tmp_path)
    )
    (result,) = rollout.results
    assert result.outcome == "failed" and result.exit_code == 1
    assert result.error is not None and "refusing the OOM recipe" in result.error
    assert [f["kind"] for f in result.findings or ()][:1] == ["kv_pool_too_small_at_startup"]
    assert not any("commit" in (c.stdin or "") or "daemon-reload" in c.text for c in fake.calls)


def test_oom_dry_run_warns_instead_of_refusing() -> None:
    fake = host(journal("kv-pool-exhausted-prefill"))
    rollout = api.remediate_oom(api.OomRequest(targets=("gpu-01",), dry_run=True), transport_factory=lambda e, s: fake)
    (result,) = rollout.results
    assert result.exit_code == 0
    assert any("refuses without --force" in w for w in result.warnings), result.warnings


def test_a_container_unit_does_not_attribute_gpu_processes() -> None:
    docker = ["/usr/bin/docker", "run", "--gpus", "all", "lmsysorg/sglang", "python3", "-m", "sglang.launch_server"]
    result = run(host(journal("incident-kimi-tp8"), gpus=["0, 97250, 96900"], apps=["9999, 95000"], argv=docker))
    assert result["foreign_gpu_processes"] == [] and result["recommendation"]["blocking"] is False
    assert any("runs in a container" in n for n in result["notes"]), result["notes"]


UUIDS = [f"GPU-5a7e0c1d-{g:04x}-4b2e-9f3a-00000000{g:04x}" for g in range(8)]
EIGHT = [f"{g}, {UUIDS[g]}, 97865, 90000" for g in range(8)]


def _on(pid: int, *gpus: int, mib: int = 90000) -> list[str]:
    return [f"{pid}, {mib}, {UUIDS[g]}" for g in gpus]


def test_a_sibling_instance_on_the_other_gpus_is_not_foreign() -> None:
    """sglang@0-3 (this unit, restarted by Restart=: MainPID 100) on GPUs 0-3; sglang@4-7 (201) on 4-7."""
    apps = [*_on(101, 0, 1, 2, 3), *_on(201, 4, 5, 6, 7)]
    result = run(host(journal("incident-kimi-tp8"), gpus=EIGHT, apps=apps, state="active"))
    assert result["foreign_gpu_processes"] == [] and result["recommendation"]["blocking"] is False, result
    assert not any("is not part of" in n for n in result["notes"]), result["notes"]
    assert result["gpu_processes"][0] == {"pid": 101, "used_bytes": 90000 << 20, "gpu_uuid": UUIDS[0]}
    assert result["gpus"][4]["uuid"] == UUIDS[4]


def test_a_process_on_the_servers_gpu_is_still_foreign() -> None:
    apps = [*_on(101, 0, 1, 2, 3), *_on(201, 4, 5, 6, 7), *_on(555, 2, mib=2048)]
    result = run(host(journal("incident-kimi-tp8"), gpus=EIGHT, apps=apps, state="active"))
    assert [(p["pid"], p["gpu_uuid"]) for p in result["foreign_gpu_processes"]] == [(555, UUIDS[2])]
    assert result["recommendation"]["blocking"] is True
    assert any("GPU process 555 (2048 MiB) is not part of" in n for n in result["notes"]), result["notes"]


def test_a_server_on_no_gpu_yet_is_placed_by_its_cuda_visible_devices() -> None:
    """Restarted and still loading (nothing on a GPU): the unit's CUDA_VISIBLE_DEVICES says where it runs;
    without it every GPU may be the server's, and the sibling counts (conservative)."""
    apps = _on(201, 4, 5, 6, 7)
    pinned = INCIDENT.replace("[Service]\n", "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0,1,2,3\n", 1)
    assert pinned != INCIDENT
    result = run(host(journal("incident-kimi-tp8"), gpus=EIGHT, apps=apps, state="active", text=pinned))
    assert result["foreign_gpu_processes"] == [] and result["recommendation"]["blocking"] is False, result
    unpinned = run(host(journal("incident-kimi-tp8"), gpus=EIGHT, apps=apps, state="active"))
    assert [p["pid"] for p in unpinned["foreign_gpu_processes"]] == [201] * 4
    assert unpinned["recommendation"]["blocking"] is True
    on_it = INCIDENT.replace("[Service]\n", "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=4,5,6,7\n", 1)
    shared = run(host(journal("incident-kimi-tp8"), gpus=EIGHT, apps=apps, state="active", text=on_it))
    assert [p["pid"] for p in shared["foreign_gpu_processes"]] == [201] * 4


def test_an_older_nvidia_smi_answer_without_uuids_still_counts_every_process() -> None:
    result = run(
        host(journal("incident-kimi-tp8"), gpus=["0, 97250, 96900"], apps=["101, 95000", "201, 95000"], state="active")
    )
    assert [p["pid"] for p in result["foreign_gpu_processes"]] == [201]
    assert result["gpus"][0]["uuid"] is None and result["foreign_gpu_processes"][0]["gpu_uuid"] is None
