"""The benchmarks still run and print their tables (`slow`; numbers are read by people, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    ("script", "args", "header"),
    [
        ("sandbox_bringup.py", ["1", "4"], "bring-up s"),
        ("fleet_forks.py", ["2"], "wall s"),  # forks 2 vs forks 1 vs the canary: the three rows
        ("ssh_handshake.py", ["2"], "wall ms"),
        ("masking.py", ["4800", "9600"], "CPU ms per line"),
    ],
)
def test_benchmark_prints_its_table(script: str, args: list[str], header: str) -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert header in run.stdout
    lines = run.stdout.splitlines()
    header_at = next(i for i, line in enumerate(lines) if header in line)
    rows = [line for line in lines[header_at + 1 :] if line.strip()]
    assert len(rows) >= 2, run.stdout


def test_vs_ansible_reduced_run_prints_the_table_and_writes_its_samples(tmp_path: Path) -> None:
    """1 host, 1 run, remediate and the floor only, `oom` and the read-only `status` and `diagnose`, profiled:
    Ansible would be installed from PyPI on first use, which a test run must not depend on (network, ~1 min);
    `make bench` runs all three."""
    out = tmp_path / "vs.json"
    run = subprocess.run(
        [sys.executable, str(BENCH / "vs_ansible.py"), "--hosts", "1", "--runs", "1"]
        + ["--contenders", "remediate,floor", "--profile", "--json-out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = {line.split()[1]: line.split() for line in run.stdout.splitlines() if line.split()[:1] == ["1"]}
    assert set(rows) == {"remediate", "floor"}, run.stdout
    assert "remediate phases s: connect" in run.stdout
    assert "remediate status vs" in run.stdout and "remediate diagnose vs" in run.stdout  # the read-only fan-out
    assert "oom remediate: the wall time cut at its seams" in run.stdout  # --profile
    samples = json.loads(out.read_text())["samples"]["1"]
    [remediate] = samples["remediate"]
    assert remediate["ssh_connections_per_host"] == 1  # counted from the host's own sshd log
    assert {"phase_connect_s", "phase_lock_s", "phase_commit_s", "phase_wait_s"} <= set(remediate)
    cuts = [k for k in remediate if k.startswith("prof_")]
    assert abs(sum(remediate[k] for k in cuts) - remediate["wall_s"]) < 0.05  # the cuts account for the wall time
    [status] = json.loads(out.read_text())["reads"]["status"]["1"]["remediate"]
    assert status["ssh_connections_per_host"] == 1


def test_startup_bench_prints_its_table() -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH / "startup.py"), "1"], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "remediate --help" in run.stdout and "exec → first packet" in run.stdout


def test_scaling_reduced_run_prints_the_table_and_writes_its_samples(tmp_path: Path) -> None:
    """bench/scaling.py on 2 hosts, 2 forks, one run each: our rollout and ansible-playbook with the collection."""
    out = tmp_path / "scaling.json"
    argv = [sys.executable, str(BENCH / "scaling.py"), "--hosts", "2", "--forks", "2", "--json-out", str(out)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "hosts/min" in run.stdout
    samples = json.loads(out.read_text())["samples"]
    assert sorted(s["contender"] for s in samples) == ["ansible", "remediate"]
    assert all(s["hosts_per_min"] > 0 and s["peak_rss_mib"] > 0 for s in samples)


def test_watch_cost_reduced_run_prints_the_table_and_writes_its_samples(tmp_path: Path) -> None:
    """bench/watch_cost.py on 2 sandbox hosts at a 1 s interval, one crash per mode, and 5 lightweight SSH endpoints."""
    out = tmp_path / "watch.json"
    argv = [sys.executable, str(BENCH / "watch_cost.py"), "--hosts", "2", "--intervals", "1", "--reps", "1"]
    argv += ["--idle-window", "3", "--endpoints", "5", "--endpoint-interval", "1", "--json-out", str(out)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "CPU core" in run.stdout and "detect med s" in run.stdout and "never polled" in run.stdout
    doc = json.loads(out.read_text())
    # one idle figure and one crash per mode: the followed journal (the default) and the poll (--no-follow)
    assert sorted(idle["mode"] for idle in doc["idle"]) == ["follow", "poll"]
    for idle in doc["idle"]:
        assert {"cpu_core", "rss_mib", "pss_mib", "threads", "sockets", "interval_s"} <= set(idle)
    assert sorted(crash["mode"] for crash in doc["detections"]) == ["follow", "poll"]
    for crash in doc["detections"]:
        assert {"host", "detected_s", "decided_s"} <= set(crash)
    assert doc["endpoints"]["endpoints"] == 5 and doc["endpoints"]["unreachable_events"] == 0
    assert {"cpu_core", "rss_mib"} <= set(doc["endpoints"]["held_only"])
