"""The watcher's SQLite state: survives a reopen, one watcher per state, answers from another process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from remediate.controller.watch_state import WatchState
from remediate.core.watch.incident import HostHistory, Incident
from remediate.errors import ConfigError


def test_state_survives_reopen(tmp_path: Path) -> None:
    s = WatchState(tmp_path)
    with s.transaction():
        s.save_cursor("h2", "sglang.service", "s=abc;i=1")
        s.save_history("h2", HostHistory(fixes=(1.0, 2.0), count_from=0.5, healthy_since=None, is_needs_human=True))
        s.save_incident(Incident("i1", "h2", "sglang.service", 1.0, 3.0, 3, ("cuda_oom_runtime",)))
        s.request_approval("a1", "i1", "h2", 3.0, 3600.0)
        s.trip_breaker("3 of 4 hosts crashed")
        s.set_paused(True)
    s.close()
    s = WatchState(tmp_path)
    assert s.cursor("h2", "sglang.service") == "s=abc;i=1" and s.cursor("h1", "sglang.service") is None
    assert s.history("h2") == HostHistory((1.0, 2.0), 0.5, None, True) and s.history("h1") == HostHistory()
    inc = s.open_incident("h2", "sglang.service")
    assert inc is not None and inc.crashes == 3 and inc.kinds == ("cuda_oom_runtime",)
    assert s.pending() == [("a1", "i1", "h2")]
    assert s.breaker_reason() == "3 of 4 hosts crashed" and s.is_paused()
    s.reset_breaker()
    s.set_paused(False)
    assert s.breaker_reason() is None and not s.is_paused()
    s.close()


def test_a_failed_decision_writes_nothing(tmp_path: Path) -> None:
    s = WatchState(tmp_path)
    with pytest.raises(RuntimeError), s.transaction():
        s.save_cursor("h1", "u", "c")
        raise RuntimeError("boom")
    assert s.cursor("h1", "u") is None
    s.close()


def test_second_watcher_refuses(tmp_path: Path) -> None:
    first = WatchState(tmp_path)
    first.claim()
    second = WatchState(tmp_path)
    with pytest.raises(ConfigError, match="another watcher runs on this state"):
        second.claim()
    first.close()
    second.claim()  # the lock went with the first watcher
    second.close()


def test_approve_and_deny_from_another_process(tmp_path: Path) -> None:
    s = WatchState(tmp_path)
    s.claim()
    s.request_approval("a1", "i1", "h2", 1.0, 3600.0)
    s.request_approval("a2", "i2", "h3", 2.0, 3600.0)
    code = (
        "import sys; from pathlib import Path; from remediate.controller.watch_state import WatchState;"
        "o = WatchState(Path(sys.argv[1])); o.answer('a1', approve=True, who='alice', now=10.0);"
        "o.answer('a2', approve=False, who='bob', now=10.0); o.set_paused(True); o.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)
    assert s.approval("a1") == ("approved", "alice") and s.approval("a2") == ("denied", "bob")
    assert s.pending() == [] and s.is_paused()
    with pytest.raises(ConfigError, match="no pending approval 'a1'"):
        s.answer("a1", approve=False, who="carol", now=10.0)
    s.close()


def test_an_expired_approval_is_refused(tmp_path: Path) -> None:
    """Past its time an approval cannot be given, pending or marked expired by the watcher: one line."""
    s = WatchState(tmp_path)
    s.request_approval("a1", "i1", "h2", 100.0, 600.0)
    s.request_approval("a2", "i2", "h3", 100.0, 600.0)
    with pytest.raises(ConfigError, match="approval 'a1' expired"):
        s.answer("a1", approve=True, who="alice", now=701.0)
    assert s.approval("a1") == ("pending", None), "nothing recorded"
    s.expire_approval("a2")
    with pytest.raises(ConfigError, match="approval 'a2' expired"):
        s.answer("a2", approve=True, who="alice", now=101.0)
    s.answer("a1", approve=True, who="alice", now=700.0)  # at its last second it still counts
    assert s.approval("a1") == ("approved", "alice")
    s.close()
