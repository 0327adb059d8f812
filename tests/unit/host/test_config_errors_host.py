"""`diagnose` and the `oom` gate on sglang's startup configuration errors and version-spelled flags, through the
Python API on one scripted host (FakeTransport). The journals are tests/data/diagnosis_cases/, each text from
the engine's source (cited in the case's expected.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate import api
from tests.support.fake_transport import listener_output, state_output
from tests.support.hosts import COMMIT, INCIDENT, POLL, commit_ok, info, written_texts
from tests.support.hosts import case_journal as journal
from tests.support.hosts import diagnose_host as host
from tests.support.hosts import diagnose_one as run
from tests.support.hosts import oom_host as make_host
from tests.support.hosts import run_oom as run_host


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        ("argparse-ambiguous-graph-flag-0.5.23", "invalid_server_argument"),
        ("argparse-unrecognised-flag-0.5.5", "invalid_server_argument"),
        ("expandable-refused-mooncake-efa-0.5.23", "expandable_segments_refused"),
        ("expandable-refused-weight-cache-daemon-0.5.23", "expandable_segments_refused"),
        ("loaded-weights-leave-no-kv-0.5.2x", "kv_pool_too_small_at_startup"),
    ],
)
def test_oom_refuses_the_recipe_on_a_startup_configuration_error_and_changes_nothing(
    tmp_path: Path, case: str, kind: str
) -> None:
    fake = host(journal(case))
    rollout = api.remediate_oom(
        api.OomRequest(targets=("gpu-01",)), transport_factory=lambda e, s: fake, retry_dir=str(tmp_path)
    )
    (result,) = rollout.results
    assert result.outcome == "failed" and result.exit_code == 1
    assert result.error is not None and f"refusing the OOM recipe: the latest failure is {kind}" in result.error
    assert not any("commit" in (c.stdin or "") or "daemon-reload" in c.text for c in fake.calls)


def test_diagnose_names_the_flag_argparse_refused_and_what_it_could_match() -> None:
    result = run(host(journal("argparse-ambiguous-graph-flag-0.5.23")))
    (finding,) = result["findings"]
    assert finding["kind"] == "invalid_server_argument" and finding["bad_flag"] == "--cuda-graph-max-bs"
    assert finding["flag_choices"] == ["--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"]
    rec = result["recommendation"]
    assert rec["blocking"] is True and rec["command"] is None
    assert "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill" in rec["reasons"][0]


def test_graph_capture_advice_uses_the_spelling_the_unit_writes() -> None:
    """No hint line in the journal: the unit's own -decode flag says the version (0.5.23 has only the split
    flags), so the advice never names the old flag that would stop it at startup."""
    new = INCIDENT.replace("--trust-remote-code", "--trust-remote-code --cuda-graph-max-bs-decode 160")
    rec = run(host(journal("graph-capture-torch-oom-in-capture-frames"), text=new))["recommendation"]
    assert "--cuda-graph-max-bs-decode 160 → 80" in rec["reasons"][0], rec["reasons"]
    assert rec["other_flags"] == {"--cuda-graph-max-bs-decode": 80}
    old = INCIDENT.replace("--trust-remote-code", "--trust-remote-code --cuda-graph-max-bs=160")
    rec = run(host(journal("graph-capture-torch-oom-in-capture-frames"), text=old))["recommendation"]
    assert "--cuda-graph-max-bs 160 → 80" in rec["reasons"][0] and rec["other_flags"] == {"--cuda-graph-max-bs": 80}
    unknown = run(host(journal("graph-capture-torch-oom-in-capture-frames")))["recommendation"]
    assert unknown["other_flags"] == {}
    assert "--cuda-graph-max-bs up to sglang 0.5.13, --cuda-graph-max-bs-decode from 0.5.14" in unknown["reasons"][0]


def test_oom_on_a_weight_cache_daemon_unit_leaves_the_allocator_alone_and_verifies_without_it() -> None:
    """sglang 0.5.23 weight_cache/daemon.py refuses expandable segments: the recipe writes the fraction and the
    chunk only, the flag summary says why, and the server is not asked for an alloc conf it must not have (a
    server without one is remediated, not rolled back)."""
    text = INCIDENT.replace("--trust-remote-code", "--trust-remote-code --weight-cache-mode daemon")
    running = {"ActiveState": "active", "SubState": "running", "NRestarts": 0, "InvocationID": "inv-2"}
    host = make_host(text)
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output("activating", "start", invocation_id="inv-2"))
    look = listener_output(listen="0.0.0.0:30000", state=running, environ="@@main 4242\n@@environ 4242\n\n@@end\n")
    host.on(r"\A# remediate: listener", look)
    host.http("/health", 200)
    host.http("/server_info", info(206635))
    result = run_host(host)
    assert result.outcome == "remediated", result.error
    [script] = host.scripts("# remediate commit")
    (written,) = written_texts(script).values()
    assert "expandable_segments" not in written and "--mem-fraction-static 0.93" in written
    assert any("left without expandable segments: --weight-cache-mode daemon" in line for line in result.summary)
