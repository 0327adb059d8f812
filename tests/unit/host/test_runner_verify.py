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
