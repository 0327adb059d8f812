"""The watcher as the fleet's detector (fleet/watch/eda.py): in report-only mode (``--dry-run``) it detects,
diagnoses and decides under the rails but never acts, and each decision reaches a real HTTP receiver on
loopback (as EDA's webhook source gets it) carrying host, unit, engine, kinds, the recommended change and
the incident id."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from remediate.controller.watch_audit import read_events
from remediate.controller.watch_state import WatchState
from remediate.core.watch.policy import Policy
from remediate.errors import ConnectError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.eda import DecisionContext
from remediate.fleet.watch.loop import Watcher
from remediate.fleet.watch.webhook import post_event
from remediate.models import HostResult
from tests.support.watch_fleet import NOW, Fleet

if TYPE_CHECKING:
    from tests.support.webhook import Hook

RECOMMENDATION = {
    "kind": "cuda_oom_runtime",
    "mem_fraction_static": 0.93,
    "chunked_prefill_size": 4096,
    "alloc_conf": "expandable_segments:True",
    "other_flags": {},
    "reasons": ["the pool left no room for the prefill's activations"],
    "blocking": False,
    "command": "remediate oom h1 --unit sglang.service --mem-fraction-static 0.93",
}


def _diagnose(engine: str, recommendation: dict[str, Any] | None) -> Any:
    def diagnose(transport: object, entry: HostEntry) -> HostResult:
        return HostResult(
            host=entry.name,
            outcome="unchanged",
            engine=engine,
            findings=({"kind": "cuda_oom_runtime"},),
            recommendation=recommendation,
        )

    return diagnose


def test_report_only_posts_each_decision_with_what_eda_needs_and_never_acts(hook: Hook, tmp_path: Path) -> None:
    fleet = Fleet(["h1", "h2"])
    fixed: list[str] = []

    def fix(entry: HostEntry) -> HostResult:
        fixed.append(entry.name)
        return HostResult(host=entry.name, outcome="remediated")

    context = DecisionContext()  # as api/watch.py wires it
    watcher = Watcher(fleet.entries, fleet.connect, context.diagnose(_diagnose("vllm", RECOMMENDATION)), fix,
                      WatchState(tmp_path), Policy(), dry_run=True,
                      notify=context.notify(lambda event: post_event(hook.url, event)))  # fmt: skip
    watcher.round(NOW)
    fleet.units["h1"].crash(NOW + 5)
    watcher.round(NOW + 10)
    watcher.close()
    watcher.state.close()

    assert fixed == [], "report-only: the watcher never acts"
    (decided,) = [b["event"] for b in hook.bodies if b["event"]["event"] == "decided"]
    assert {k: decided[k] for k in ("host", "unit", "verdict", "dry_run", "engine", "kinds")} == {
        "host": "h1",
        "unit": "sglang.service",
        "verdict": "act",
        "dry_run": True,
        "engine": "vllm",
        "kinds": ["cuda_oom_runtime"],
    }
    assert decided["recommendation"] == RECOMMENDATION
    (audited,) = [e for e in read_events(tmp_path) if e["event"] == "decided"]
    assert decided["incident"] == audited["incident"] and len(decided["incident"]) == 8  # the audit's incident
    assert [e["outcome"] for e in read_events(tmp_path) if e["event"] == "outcome"] == ["dry_run"]


def test_a_diagnosis_without_a_recommendation_still_decides_and_says_so(tmp_path: Path) -> None:
    fleet = Fleet(["h1"])
    events: list[dict[str, Any]] = []
    context = DecisionContext()
    watcher = Watcher(fleet.entries, fleet.connect, context.diagnose(_diagnose("sglang", None)),
                      lambda e: None,  # type: ignore[arg-type]
                      WatchState(tmp_path), Policy(), dry_run=True, notify=context.notify(events.append))  # fmt: skip
    watcher.round(NOW)
    fleet.units["h1"].crash(NOW + 5)
    watcher.round(NOW + 10)
    watcher.close()
    watcher.state.close()
    (decided,) = [e for e in events if e["event"] == "decided"]
    assert (decided["engine"], decided["kinds"], decided["recommendation"]) == ("sglang", ["cuda_oom_runtime"], None)


def test_a_diagnosis_that_raises_leaves_no_stale_context() -> None:
    context = DecisionContext()
    good = context.diagnose(_diagnose("vllm", RECOMMENDATION))
    good(None, HostEntry(name="h1", address="127.0.0.1"))

    def broken(transport: object, entry: HostEntry) -> HostResult:
        raise ConnectError("h1", "refused")

    with pytest.raises(ConnectError):
        context.diagnose(broken)(None, HostEntry(name="h1", address="127.0.0.1"))
    events: list[dict[str, Any]] = []
    context.notify(events.append)({"event": "decided", "host": "h1", "verdict": "act"})
    context.notify(events.append)({"event": "outcome", "host": "h1"})
    assert events[0] == {"event": "decided", "host": "h1", "verdict": "act", "engine": None, "kinds": [],
                         "recommendation": None}  # fmt: skip
    assert events[1] == {"event": "outcome", "host": "h1"}  # only decisions carry it
