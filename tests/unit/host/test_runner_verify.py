"""The server that answers after the restart must report the values the unit now sets."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from remediate.core.unitfile.edit import DesiredState, SourceFile, UnitSources, plan_edit
from remediate.errors import RemediationError
from remediate.host.common.health import Healthy
from remediate.host.common.options import RunOptions
from remediate.host.common.verify import verify_server_args, verify_tokens
from remediate.models import HostResult

INCIDENT = (Path(__file__).resolve().parents[3] / "examples" / "incident" / "sglang.service").read_text()
PLAN = plan_edit(
    UnitSources(fragment=SourceFile("/etc/systemd/system/sglang.service", INCIDENT), env_files={}),
    DesiredState(),
    now=datetime(2026, 11, 29, tzinfo=UTC),
)


def test_matching_server_args_pass() -> None:
    checked = verify_server_args("gpu-01", {"mem_fraction_static": 0.93, "chunked_prefill_size": 4096}, PLAN)
    assert checked == {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"}
    # an info document without args (journal fallback) proves nothing, and says it compared nothing
    assert verify_server_args("gpu-01", None, PLAN) == {}
    assert verify_server_args("gpu-01", {"max_total_num_tokens": 195011}, PLAN) == {}


@pytest.mark.parametrize(
    "info",
    [
        {"mem_fraction_static": 0.94, "chunked_prefill_size": 4096},  # the restart did not take
        {"mem_fraction_static": 0.93, "chunked_prefill_size": -1},  # someone else's server on the port
    ],
)
def test_mismatch_is_a_remediation_error(info: dict) -> None:
    with pytest.raises(RemediationError, match="the server reports"):
        verify_server_args("gpu-01", info, PLAN)


def test_longest_prompt_is_reported_and_a_shrink_below_the_context_warned() -> None:
    result = HostResult(host="gpu-01")
    info = {"max_total_num_tokens": 195011, "max_req_input_len": 195005, "context_length": 262144}
    verify_tokens(result, Healthy(tokens=195011, source="/server_info", info=info, seconds=1.0, polls=3), RunOptions())
    assert result.max_req_input_len == 195005
    assert result.warnings == ["prompts longer than 195,005 tokens are now rejected (context length 262,144)"]


HONOR = "SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION"
AITER = {"attention_backend": "aiter", "chunked_prefill_size": 4096}


def test_the_aiter_factor_is_what_the_server_reports_not_a_failed_restart() -> None:
    # sglang 0.5.23 arg_groups/attention_hook.py: 0.93 written, 0.93 * 0.85 resolved on ROCm with aiter
    notes: list[str] = []
    info = {**AITER, "mem_fraction_static": 0.93 * 0.85, "context_length": 131072}
    checked = verify_server_args("gpu-01", info, PLAN, env={}, notes=notes, version=(0, 5, 23))
    assert checked["mem_fraction_static"] == "0.93"
    assert len(notes) == 1 and "0.85" in notes[0] and "aiter" in notes[0]
    # the context length unknown (the info's is the user's override, usually null): either value is explained
    notes.clear()
    verify_server_args("gpu-01", {**AITER, "mem_fraction_static": 0.7905}, PLAN, notes=notes)
    assert notes and "0.7905" in notes[0]


@pytest.mark.parametrize(
    ("info", "env"),
    [
        ({**AITER, "mem_fraction_static": 0.7905, "context_length": 131072}, {HONOR: "1"}),
        ({**AITER, "mem_fraction_static": 0.7905, "context_length": 8192}, {}),
        ({"attention_backend": "flashinfer", "mem_fraction_static": 0.7905, "chunked_prefill_size": 4096}, {}),
    ],
)  # fmt: skip
def test_the_factor_where_it_cannot_apply_is_a_failed_restart(info: dict, env: dict) -> None:
    with pytest.raises(RemediationError, match="the server reports mem_fraction_static=0.7905"):
        verify_server_args("gpu-01", info, PLAN, env=env)


def test_the_unscaled_value_where_the_factor_must_apply_names_what_sglang_resolves() -> None:
    info = {**AITER, "mem_fraction_static": 0.93, "context_length": 131072}
    with pytest.raises(RemediationError, match=r"which sglang resolves to 0\.7905"):
        verify_server_args("gpu-01", info, PLAN, env={}, version=(0, 5, 23))


@pytest.mark.parametrize(
    ("version", "reported", "fails"),
    [("0.5.23", 0.93, True), ("0.5.23", 0.7905, False), ("0.5.3", 0.7905, True), ("0.5.3", 0.93, False)],
)
def test_the_servers_own_version_decides_whether_the_factor_applies(version: str, reported: float, fails: bool) -> None:
    """No version passed: the server-info document's own "version" (http_server.py get_server_info) decides;
    sglang 0.5.3 has no aiter factor, 0.5.23 has it."""
    info = {**AITER, "mem_fraction_static": reported, "context_length": 131072, "version": version}
    if fails:
        with pytest.raises(RemediationError, match=f"the server reports mem_fraction_static={reported}"):
            verify_server_args("gpu-01", info, PLAN, env={})
    else:
        assert verify_server_args("gpu-01", info, PLAN, env={})["mem_fraction_static"] == "0.93"


def test_unit_env_reads_the_units_sglang_switches_and_notes_name_them() -> None:
    from remediate.core.startup import parse_startup
    from remediate.host.common.verify import resolution_notes, unit_env

    text = INCIDENT.replace(
        "[Service]\n",
        "[Service]\nEnvironment=SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1\n",
        1,
    )
    env = unit_env(UnitSources(fragment=SourceFile("/etc/systemd/system/sglang.service", text), env_files={}))
    assert env == {"SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION": None, "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"}
    notes = resolution_notes({**AITER, "mem_fraction_static": 0.7905}, "0.93", env, parse_startup([]))
    assert len(notes) == 2 and "aiter" in notes[0] and "after CUDA-graph capture" in notes[1]
    assert resolution_notes({"mem_fraction_static": 0.93}, "0.93", {}, None) == []
    broken = UnitSources(fragment=SourceFile("/etc/systemd/system/x.service", "[Service]\nExecStart=/bin/true\n"))
    assert unit_env(broken) == {}


def test_the_pool_logged_since_the_restart_against_the_one_reported() -> None:
    from remediate.host.common.verify import logged_pool_problem, read_started
    from tests.support.fake_transport import FakeTransport

    # sglang mem_cache/memory_pool.py _finalize_allocation_log: the pool this start allocated
    line = "[2026-12-06 02:00:00 TP0] KV Cache is allocated. #tokens: 150000, KV size: 9.80 GB\n"
    host = FakeTransport("gpu-01").on(r"\Ajournalctl", line)
    started = read_started(host, "sglang.service", 1764800000)
    assert "--since @1764800000" in host.calls[0].command
    problem = logged_pool_problem(started, {"max_total_num_tokens": 209007})
    assert problem is not None and "150,000" in problem and "209,007" in problem
    assert logged_pool_problem(started, {"max_total_num_tokens": 150000}) is None
    assert logged_pool_problem(started, {}) is None
