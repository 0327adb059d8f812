"""Journal text is evidence only where sglang, torch and systemd print it (the start of a message, a
traceback's exception line): a request or prompt that sglang logs mid-line (``--log-requests``: "Receive:
obj=GenerateReqInput(text='…')") never makes a finding, never moves the startup numbers that plan and --auto
read, and never fills the startup-line grep. The same texts as sglang prints them still count."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.diagnosis import AdvisorInput, advise, parse_journal
from remediate.core.startup import STARTUP_LINES_ERE, parse_capacity_line, parse_startup
from remediate.host.plan.budget import diagnosed_spike

CASES = Path(__file__).resolve().parents[3] / "data" / "diagnosis_cases"
FORGED_CASE = CASES / "request-text-is-not-evidence" / "journal.txt"
HEALTHY = (CASES / "healthy-journal-no-findings" / "journal.txt").read_text().splitlines()
FORGED = [line for line in FORGED_CASE.read_text().splitlines() if "Receive: obj=" in line or "prompt=" in line]
FORGED += [line for line in FORGED_CASE.read_text().splitlines() if "Finish: obj=" in line]
NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir() and p.name != "request-text-is-not-evidence")


def _without_evidence(numbers: object) -> object:
    return replace(numbers, evidence=())  # type: ignore[type-var]


def test_the_forged_lines_are_there() -> None:
    assert len(FORGED) >= 10 and all("CUDA out of memory" not in line[:60] for line in FORGED)


@pytest.mark.parametrize("name", NAMES)
def test_logged_requests_change_no_finding_and_no_number(name: str) -> None:
    """Every golden journal with the forged requests appended: the same findings, runs, recommendation,
    startup numbers, capacity line and spike (what plan and --auto read) as without them."""
    lines = (CASES / name / "journal.txt").read_text().splitlines()
    forged = lines + FORGED
    before, after = parse_journal(lines), parse_journal(forged)
    assert [f.to_dict() for f in after.findings] == [f.to_dict() for f in before.findings]
    assert after.runs == before.runs
    settings = AdvisorInput(mem_fraction_static=0.9)
    assert advise(after, settings).to_dict() == advise(before, settings).to_dict()
    assert _without_evidence(parse_startup(forged)) == _without_evidence(parse_startup(lines))
    assert parse_capacity_line(forged) == parse_capacity_line(lines)
    assert diagnosed_spike(forged) == diagnosed_spike(lines)


def test_the_same_texts_as_sglang_prints_them_still_count() -> None:
    j = "Dec 01 08:07:01 gpu-01 python3[4711]: "
    crash = [
        f"{j}[2026-12-01 08:07:00 TP0] Prefill batch. #new-seq: 1, #new-token: 30000, #cached-token: 0, "
        "token usage: 0.40, #running-req: 0, #queue-req: 0,",
        f"{j}[2026-12-01 08:07:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        f'{j}  File "/x/sglang/srt/model_executor/model_runner.py", line 1, in forward_extend',
        f"{j}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB. "
        "GPU 0 has a total capacity of 79.11 GiB of which 1.00 GiB is free.",
    ]
    (finding,) = parse_journal(HEALTHY + crash).findings
    assert finding.kind == "cuda_oom_runtime" and finding.tried_bytes == 80 << 30 and finding.prefill_tokens == 30000
    spike, _ = diagnosed_spike(HEALTHY + crash)
    assert spike is not None and spike.tried_bytes == 80 << 30
    capacity = (
        "[2026-12-01 08:07:02 TP0] max_total_num_tokens=1, chunked_prefill_size=1, max_prefill_tokens=1, "
        "max_running_requests=1, context_len=1"
    )
    assert parse_capacity_line([*HEALTHY, capacity]) == 1
    assert parse_startup([*HEALTHY, capacity]).max_total_num_tokens == 1
    loop = ["Dec 01 08:08:00 gpu-01 systemd[1]: sglang.service: Start request repeated too quickly."]
    assert [f.kind for f in parse_journal(HEALTHY + loop).findings] == ["crash_loop"]


def test_the_startup_grep_selects_only_lines_that_start_with_a_startup_message() -> None:
    """The remote ``grep -E`` (host/budget.read_journal) run for real on ``-o cat`` text: logged requests
    never take the 400 places of the startup lines."""
    cat = [re.sub(r"^\w{3} \d\d \S+ \S+ \S+: ", "", line) for line in HEALTHY + FORGED]
    run = subprocess.run(["grep", "-E", STARTUP_LINES_ERE], input="\n".join(cat) + "\n", capture_output=True, text=True)
    selected = run.stdout.splitlines()
    assert selected and not any("Receive: obj=" in line or "Finish: obj=" in line for line in selected)
    assert len(selected) == sum(
        1 for line in cat if re.match(r"\[[^]]*\] (server_args=|Load weight|KV Cache|max_total)", line)
    )


def test_message_starts_follow_the_exception_class_and_the_wrappers() -> None:
    from remediate.core.logline import message_starts

    text = "RuntimeError: Capture cuda graph failed: CUDA error: out of memory"
    assert [text[i:][:10] for i in message_starts(text)] == ["RuntimeErr", "Capture cu", "CUDA error", "out of mem"]
    assert message_starts("Receive: obj=GenerateReqInput(text='torch.OutOfMemoryError: CUDA out of memory')") == [0]


def test_a_logged_request_quoting_systemd_is_not_systemd_giving_up() -> None:
    """The wait's failure message (host/health.fail) says the start limit stopped the unit only on systemd's line."""
    from remediate.core.diagnosis.explain import explain_crash
    from remediate.core.diagnosis.systemd import gave_up_restarting

    cat = [re.sub(r"^\w{3} \d\d \S+ \S+ \S+: ", "", line) for line in FORGED]
    assert not gave_up_restarting(cat) and not gave_up_restarting(FORGED)
    systemd = "sglang.service: Start request repeated too quickly."
    assert gave_up_restarting([*cat, systemd]) and systemd in explain_crash([*cat, systemd])


_PHRASES = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. ",
    "RuntimeError: CUDA error: out of memory ",
    "Exception: Capture cuda graph failed: CUDA out of memory. ",
    "Scheduler hit an exception: Traceback (most recent call last): ",
    "Prefill out of memory. Try to allocate 9000 tokens. Available tokens: 1 ",
    "Not enough memory. Please try to increase --mem-fraction-static. ",
    "Loaded weights leave no GPU memory for the KV cache ",
    "alloc_req_slots runs out of memory. available_size()=1, num_reqs=2 ",
    "The memory capacity is unbalanced. min_per_gpu_memory=1.0 ",
    "Failed to allocate memory for buf with size 99 ",
    "an illegal memory access was encountered ",
    "server_args=ServerArgs(mem_fraction_static=0.1, ",
    "Load weight begin. avail mem=1.00 GB ",
    "Load weight end. type=X, avail mem=0.50 GB ",
    "KV Cache is allocated. #tokens: 5, KV size: 0.01 GB ",
    "max_total_num_tokens=1, chunked_prefill_size=1, max_prefill_tokens=1, max_running_requests=1, context_len=1 ",
    "sglang.service: Start request repeated too quickly. ",
    "Prefill batch. #new-seq: 1, #new-token: 99999, ",
    "The server is fired up and ready to roll! ",
    "\\n",
    "'",
    '"',
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PHRASES), min_size=1, max_size=6), st.sampled_from(["Receive: obj=", "Finish: obj="]))
def test_any_logged_request_text_is_never_evidence(phrases: list[str], head: str) -> None:
    text = "".join(phrases)
    line = f"Dec 01 08:06:07 gpu-01 python3[4711]: [2026-12-01 08:06:07] {head}GenerateReqInput(text={text!r})"
    forged = [*HEALTHY, line]
    assert parse_journal(forged).findings == () and parse_journal(forged).runs == parse_journal(HEALTHY).runs
    assert _without_evidence(parse_startup(forged)) == _without_evidence(parse_startup(HEALTHY))
    assert parse_capacity_line(forged) == parse_capacity_line(HEALTHY)
