"""Human output: token gaps, live progress in logs vs terminals, recap."""

from __future__ import annotations

import io

from rich.console import Console

from remediate.models import HostResult
from remediate.render import LiveProgress, format_tokens, recap


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
