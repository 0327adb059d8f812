"""The watcher's chaos run, reduced (issue 22): 6 of the session's sandbox hosts, `remediate watch` running as a
subprocess, 25 s of random 32k-prefill crashes, startup failures, SSH connection cuts and watcher restarts
(SIGKILL/SIGTERM), one burst past the breaker's threshold; then every incident has its end, the audit log every
step, each unit its old or new bytes, and the breaker tripped exactly when its threshold was crossed by the
crashes' own times, each counted once (tests/support/watch_chaos_check.py). Seeded: ``CHAOS_SEED=N`` replays a
schedule (the seed is printed). The 20-host run is ``bench/watch_chaos.py``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxHost
from tests.support.watch_chaos import Chaos, ChaosConfig, dump
from tests.support.watch_chaos_check import check, lines

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_chaos_six_hosts(
    sandbox_fleet: Sandbox, fresh_hosts: Callable[[int], list[SandboxHost]], tmp_path: Path
) -> None:
    seed = int(os.environ.get("CHAOS_SEED", "22"))
    print(f"chaos seed {seed} (CHAOS_SEED={seed} replays it)")
    config = ChaosConfig(seed=seed, duration_s=25, breaker_count=2, breaker_window_s=8, rollback_share=0.34)
    chaos = Chaos(sandbox_fleet, fresh_hosts(6), tmp_path, config)
    quiet = chaos.run()
    report = check(chaos, "crash_time")
    dump(chaos, report, tmp_path / "chaos.json")
    text = "\n".join(lines(report))
    print(text)
    assert quiet, f"the watcher did not quiet down after the injections\n{text}"
    assert not report["violations"], text
    assert sum(report["incidents"].values()) > 0, text
    assert report["breaker"]["trips"] == 1, text  # the burst crosses the threshold
