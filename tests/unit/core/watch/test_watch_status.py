"""`watch status` per host (core/watch/status.py) and its text (cli/render/watch.py): the last crash and fix
from the audit, when the rails next allow a fix, ages; the watcher's one line per event."""

from __future__ import annotations

from typing import Any

from remediate.cli.render.watch import event_line, status_lines
from remediate.core.watch.incident import DAY_S, HostHistory
from remediate.core.watch.policy import Policy
from remediate.core.watch.status import HostRows, host_status, next_fix_allowed

T = 1_800_000_000.0
POLICY = Policy(cooldown_s=3600.0, cap_per_day=2)
FIX = {"mem_fraction_static": "0.94", "chunked_prefill_size": None}
FIXED = {"mem_fraction_static": "0.88", "chunked_prefill_size": "4096"}


def _night(host: str = "gpu-2") -> list[dict[str, Any]]:
    return [
        {"event": "detected", "at": T + 1, "host": host, "unit": "sglang.service", "reason": "unit failed",
         "crashes": [{"at": T, "key": "inv1"}]},
        {"event": "diagnosed", "at": T + 2, "host": host, "kinds": ["cuda_oom_runtime"], "tokens": 209007},
        {"event": "decided", "at": T + 2, "host": host, "unit": "sglang.service", "verdict": "act",
         "reason": "cuda_oom_runtime: fixed with the auto plan", "incident": "7b0ca3c4"},
        {"event": "acted", "at": T + 3, "host": host, "unit": "sglang.service", "incident": "7b0ca3c4"},
        {"event": "outcome", "at": T + 45, "host": host, "unit": "sglang.service", "incident": "7b0ca3c4",
         "outcome": "remediated", "flags": {"before": FIX, "after": FIXED},
         "env": {"before": {"PYTORCH_CUDA_ALLOC_CONF": None},
                 "after": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}},
         "tokens": 195011, "backup": "/etc/systemd/system/sglang.service.bak.oom.1800000003"},
    ]  # fmt: skip


def test_a_fixed_host_says_its_crash_its_change_its_backup_and_its_cooldown() -> None:
    rows = HostRows(HostHistory(fixes=(T + 3,)))
    doc = host_status("gpu-2", ("sglang.service",), "cooling_down", _night(), rows, POLICY, T + 600)
    assert doc["last_crash"] == {"at": T, "unit": "sglang.service", "kinds": ["cuda_oom_runtime"],
                                 "reason": "unit failed"}  # fmt: skip
    fix = doc["last_fix"]
    assert (fix["at"], fix["took_s"], fix["outcome"]) == (T + 3, 42.0, "remediated")
    assert fix["fraction"] == {"name": "mem_fraction_static", "before": "0.94", "after": "0.88"}
    assert fix["chunk"] == {"name": "chunked_prefill_size", "before": None, "after": "4096"}
    assert fix["alloc_conf"] == {"name": "PYTORCH_CUDA_ALLOC_CONF", "before": None, "after": "expandable_segments:True"}
    assert fix["tokens"] == {"before": 209007, "after": 195011}
    assert fix["backup"].endswith(".bak.oom.1800000003")
    assert doc["next_fix"] == {"at": T + 3 + 3600, "why": "cooldown", "detail": "cooldown 3600s"}
    assert doc["state"] == "cooling_down" and doc["fixes_24h"] == 1


def test_the_cooldown_over_the_host_reads_healthy_and_a_fix_is_allowed_now() -> None:
    rows = HostRows(HostHistory(fixes=(T + 3,)))
    doc = host_status("gpu-2", ("sglang.service",), "cooling_down", _night(), rows, POLICY, T + 3 + 3601)
    assert doc["state"] == "healthy" and doc["next_fix"]["at"] is None and doc["next_fix"]["why"] is None


def test_past_the_cap_the_next_fix_is_when_the_oldest_leaves_the_day() -> None:
    history = HostHistory(fixes=(T, T + 7200))
    assert next_fix_allowed(history, POLICY, T + 9000) == {"at": T + DAY_S, "why": "cap",
                                                           "detail": "2 fixes in 24h (cap 2)"}  # fmt: skip
    marked = HostHistory(fixes=(T,), is_needs_human=True)
    assert next_fix_allowed(marked, POLICY, T + 9000)["why"] == "needs_human"


def test_a_fix_stamped_in_the_future_still_holds_the_cooldown() -> None:
    assert next_fix_allowed(HostHistory(fixes=(T + 500,)), POLICY, T)["why"] == "cooldown"


def test_a_healthy_host_has_no_crash_no_fix_and_its_incidents_and_asks_are_aged() -> None:
    rows = HostRows(HostHistory(), ({"id": "a1", "opened_at": T - 120, "crashes": 1, "outcome": "report"},),
                    ({"id": "a1", "incident": "a1", "created_at": T - 60},))  # fmt: skip
    doc = host_status("gpu-1", ("sglang.service",), "healthy", _night("gpu-2"), rows, POLICY, T)
    assert doc["last_crash"] is None and doc["last_fix"] is None, "another host's events are not this one's"
    assert doc["incidents"][0]["age_s"] == 120.0 and doc["approvals"][0]["age_s"] == 60.0


def test_one_line_per_event_and_none_for_the_rest() -> None:
    night = _night()
    lines = [event_line(e) for e in night]
    assert lines[1] is None, "diagnosed: in the audit, not a line"
    assert lines[0] is not None and lines[0].endswith("gpu-2 sglang.service crashed: unit failed")
    assert lines[2] is not None and "decided act: cuda_oom_runtime" in lines[2]
    assert lines[3] is not None and lines[3].endswith("fixing (incident 7b0ca3c4)")
    assert lines[4] is not None and lines[4].endswith(
        "fix remediated: fraction 0.94→0.88, chunk -→4096, alloc -→expandable_segments:True"
    )
    assert event_line({"event": "folded", "at": T}) is None


def test_status_text_fits_80_columns_and_names_the_undo() -> None:
    rows = HostRows(HostHistory(fixes=(T + 3,)))
    doc = {
        "breaker": None, "paused": False, "now": T + 600, "hosts": {"gpu-2": "cooling_down"}, "no_unit": {},
        "watched": [host_status("gpu-2", ("sglang.service",), "cooling_down", _night(), rows, POLICY, T + 600),
                    host_status("gpu-1", ("sglang.service",), "healthy", [], HostRows(HostHistory()), POLICY, T)],
    }  # fmt: skip
    lines = status_lines(doc)
    assert lines[0].startswith("breaker: closed; paused: no; as of ")
    assert "gpu-2: cooling_down  (sglang.service)" in lines and "gpu-1: healthy  (sglang.service)" in lines
    text = "\n".join(lines)
    assert "cuda_oom_runtime" in text and "remediated in 42s" in text
    assert "fraction 0.94→0.88; chunk -→4096; tokens 209,007→195,011\n         alloc -→expandable_segments:True" in text
    assert "undo: remediate rollback gpu-2 --to /etc/systemd/system/sglang.service.bak.oom.1800000003" in text
    assert "next   fix allowed " in text and "(in 50m; cooldown 3600s)" in text
    assert all(len(line) <= 80 for line in lines if not line.lstrip().startswith("undo: ")), lines


def test_an_event_line_masks_secrets_as_the_audit_does() -> None:
    line = event_line({"event": "outcome", "at": T, "host": "gpu-2", "outcome": "failed",
                       "error": "sglang --api-key sk-live-123456 refused"})  # fmt: skip
    assert line is not None and "sk-live-123456" not in line and "fix failed" in line
