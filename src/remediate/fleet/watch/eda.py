"""The watcher as the fleet's detector for Event-Driven Ansible: each ``decided`` event it notifies carries the
diagnosis it was decided on, so that a rulebook can act on it without asking the host again.

``remediate watch all -i inventory.yaml --dry-run --webhook URL`` is the report-only mode: it
detects, diagnoses and decides under the same rails (the policy's kinds, cooldown, cap, breaker,
concurrency, approval) and never acts. Each decision is POSTed as ``{"text": …, "event": {…}}``
(fleet/watch/webhook.py), the event being (docs/WATCH.md, "A detector for Event-Driven Ansible")::

    {"event": "decided", "host": "gpu-3", "unit": "sglang.service", "incident": "1f0c9a2e",
     "verdict": "act", "reason": "…", "dry_run": true,
     "engine": "sglang", "kinds": ["cuda_oom_runtime"],
     "recommendation": {"kind": "cuda_oom_runtime", "mem_fraction_static": 0.93, "chunked_prefill_size": 4096,
                        "alloc_conf": "expandable_segments:True", "other_flags": {}, "reasons": […],
                        "blocking": false, "command": "remediate oom gpu-3 …"},
     "at": 1796000000.1, "round_at": 1796000000.0}

:class:`DecisionContext` wraps the watcher's ``diagnose`` (each host's last diagnosis remembered) and its
``notify`` (that diagnosis added to the host's ``decided`` events); the loop itself is untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from remediate.fleet.inventory import HostEntry
from remediate.models import HostResult

T = TypeVar("T")
Event = dict[str, Any]


def decision_context(report: HostResult | None) -> dict[str, Any]:
    """What a decision carries of its diagnosis: the engine, the findings' kinds and the recommended change
    (None where the diagnosis failed)."""
    recommendation = report.recommendation if report is not None else None
    return {
        "engine": report.engine if report is not None else None,
        "kinds": [str(f.get("kind")) for f in (report.findings or ())] if report is not None else [],
        "recommendation": dict(recommendation) if recommendation is not None else None,
    }


class DecisionContext:
    """Each host's last diagnosis, added to its ``decided`` events (the watcher's loop thread calls both)."""

    def __init__(self) -> None:
        self._last: dict[str, dict[str, Any]] = {}

    def diagnose(self, inner: Callable[[T, HostEntry], HostResult]) -> Callable[[T, HostEntry], HostResult]:
        def one(transport: T, entry: HostEntry) -> HostResult:
            self._last[entry.name] = decision_context(None)  # a diagnosis that raises leaves no stale one
            report = inner(transport, entry)
            self._last[entry.name] = decision_context(report)
            return report

        return one

    def notify(self, inner: Callable[[Event], None]) -> Callable[[Event], None]:
        def one(event: Event) -> None:
            if event.get("event") == "decided":
                event = {**event, **self._last.get(str(event.get("host")), decision_context(None))}
            inner(event)

        return one
