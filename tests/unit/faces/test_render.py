"""Human output: token gaps, live progress in logs vs terminals, recap."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from remediate.cli.render.console import format_tokens
from remediate.cli.render.results import LiveProgress, recap, status_table
from remediate.models import DiagnosisReport, HostResult, JsonObject, StatusReport, UnitState


def test_format_tokens_like_the_incident() -> None:
    assert format_tokens(195011, 200000) == "195,011 (target 200,000: −2.5%)"
    assert format_tokens(210000, 200000) == "210,000 (target 200,000: +5.0%)"
    assert format_tokens(195011, None) == "195,011"


def test_progress_in_a_log_prints_rollout_events_and_throttled_waits_only() -> None:
    out = io.StringIO()
    progress = LiveProgress(Console(file=out, force_terminal=False, width=200), log_every=3600)
    with progress:
        progress("gpu-01", "connect", "0.07s")
        progress("gpu-01", "waiting", "loading (port closed) · 0s · Load weight begin.")
        progress("gpu-01", "waiting", "loading (port closed) · 1s · Load weight end.")  # within log_every
        progress("rollout", "", "batch 2/3: 4 host(s)")
    lines = out.getvalue().splitlines()
    assert lines == [
        "gpu-01 waiting   loading (port closed) · 0s · Load weight begin.",
        "rollout           batch 2/3: 4 host(s)",
    ]


def test_progress_for_json_in_a_log_is_silent() -> None:
    out = io.StringIO()
    with LiveProgress(Console(file=out, force_terminal=False), quiet=True) as progress:
        progress("rollout", "", "batch 1/1")
        progress("gpu-01", "waiting", "loading")
    assert out.getvalue() == ""


def test_progress_on_a_terminal_is_transient() -> None:
    out = io.StringIO()
    with LiveProgress(Console(file=out, force_terminal=True, width=120)) as progress:
        progress("gpu-01", "waiting", "warming up (/health 503) · 3s · Capture cuda graph end.")
        with progress.suspended():
            pass
        progress("rollout", "", "halting: canary host gpu-01 rolled_back")
    text = out.getvalue()
    assert "halting: canary host gpu-01 rolled_back" in text  # events scroll and stay
    assert "warming up" in text  # the live line was drawn (then erased: transient)


def test_recap_table_lists_every_host() -> None:
    out = io.StringIO()
    recap(
        Console(file=out, width=200),
        [
            HostResult(host="gpu-01", outcome="remediated", max_total_num_tokens=195011, target_tokens=200000),
            HostResult(host="gpu-02", outcome="not_attempted", error="not attempted: rollout halted"),
        ],
    )
    text = out.getvalue()
    assert "195,011 (target 200,000: −2.5%)" in text and "not_attempted" in text
    assert "1 not_attempted, 1 remediated" in text


def test_diagnose_report_says_what_why_evidence_and_the_command() -> None:
    from rich.console import Console

    from remediate.cli.render.diagnose import diagnose_report
    from remediate.models import HostResult

    finding = {
        "kind": "cuda_oom_runtime",
        "rank": 0,
        "phase": "prefill",
        "prefill_tokens": 32768,
        "evidence": [
            "[t TP0] Scheduler hit an exception: Traceback",
            '  File "x.py", line 1',
            "torch.OutOfMemoryError: …",
        ],
    }
    rec = {"kind": "cuda_oom_runtime", "mem_fraction_static": 0.9, "chunked_prefill_size": 4096,
           "alloc_conf": "expandable_segments:True", "other_flags": {}, "reasons": ["896.00 MiB needed"],
           "blocking": False, "command": "remediate oom gpu-01 --mem-fraction-static 0.90"}  # fmt: skip
    ok = HostResult(host="gpu-01", unit="sglang.service", outcome="unchanged")
    ok.findings, ok.recommendation = (finding,), rec
    gpu: JsonObject = {"index": 0, "used_bytes": 1 << 30, "total_bytes": 2 << 30}
    ok.diagnosis = DiagnosisReport(UnitState("failed", "failed", 2), all_findings=1, is_stale=False, gpus=(gpu,))
    bad = HostResult(host="gpu-02", outcome="unreachable", error="gpu-02: connection refused")
    console = Console(record=True, width=200)
    diagnose_report(console, [ok, bad])
    text = console.export_text()
    assert "what happened: torch ran out of GPU memory while serving (TP0, prefill of 32,768 tokens)" in text
    assert "    torch.OutOfMemoryError: …" in text and 'File "x.py"' not in text
    assert "- 896.00 MiB needed" in text
    assert "recommendation: --mem-fraction-static 0.90, --chunked-prefill-size 4096" in text
    assert "run: remediate oom gpu-01 --mem-fraction-static 0.90" in text
    assert "GPU 0: 1.00 of 2.00 GiB in use" in text
    assert "gpu-02  error gpu-02: connection refused" in text


def _status_rows(*results: HostResult) -> dict[str, str]:
    out = io.StringIO()
    status_table(Console(file=out, force_terminal=False, width=200), list(results))
    rows = [line for line in out.getvalue().splitlines() if line.startswith("│")]
    return {cells[0]: cells[-1] for cells in ([c.strip() for c in row.strip("│").split("│")] for row in rows)}


def test_status_says_drift_where_the_running_server_differs_from_the_remediated_unit() -> None:
    state = StatusReport(remediated=True, state=UnitState("active", "running"), need_daemon_reload=False)
    drift = HostResult(host="gpu-01", outcome="drift", unit="sglang.service", status=state)
    fine = HostResult(host="gpu-02", outcome="unchanged", unit="sglang.service", status=state)
    todo = HostResult(
        host="gpu-03", outcome="unchanged", unit="sglang.service", status=replace(state, remediated=False)
    )
    rows = _status_rows(drift, fine, todo)
    assert rows == {"gpu-01": "unit only (drift)", "gpu-02": "yes", "gpu-03": "no"}
