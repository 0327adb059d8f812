"""Issue 33's acceptance on real systemd: the incident's unit on the sglang 0.5.23 stand-in at TP8 lingers after
its OOM (the SIGQUIT handler's 5 s settle, dumps and 60 s coredump wait, the HTTP server silent, the unit
active) as sglang 0.5.23 does; the watcher with its default policy acts on torch's OOM line confirmed by the
silent health endpoint, ends the lingering process and fixes the unit: exactly one backup, one start, one
incident, and the old invocation's exit is never a second crash. And the same crash text sent as request text
(`--log-requests`) starts nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from sandbox import Sandbox
from sandbox.units import free_port, incident_unit
from tests.support.fleet import write_inventory
from tests.support.node import UNIT, UNIT_PATH, Node, _cli_env, poll, remediate_argv

pytestmark = pytest.mark.e2e
# The linger is 65 simulated seconds (13 s wall at this scale); a load of 30 simulated seconds (6 s) and a
# warm-up of 10 (2 s): the watcher's fix must come well inside the linger to cut it.
KNOBS = {"time_scale": 0.2, "api_version": "0.5.23", "load_s": 30.0, "warmup_s": 10.0}
CRASH_TEXT = (
    "[2026-12-05 03:12:09 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB.\n"
    "[2026-12-05 03:12:09] SIGQUIT received. signum=3, frame=None. It usually means one child failed."
)


class _Watch:
    """`remediate watch run` as a subprocess (journal followed), stopped by its PID."""

    def __init__(self, inventory: Path, work: Path, *extra: str) -> None:
        self.state, self.log = work / "watch-state", work / "watcher.log"
        argv = remediate_argv("watch", "run", "all", "-i", str(inventory), "--interval", "2s",
                              "--state-dir", str(self.state), "--wait-timeout", "120", *extra)  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
        env.update(REMEDIATE_STATE_DIR=str(work / "controller"), COLUMNS="200")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=log, start_new_session=True)

    def events(self, kind: str | None = None) -> list[dict[str, object]]:
        audit = self.state / "watch-audit.jsonl"
        events = [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []
        return [e for e in events if kind is None or e["event"] == kind]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=150)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _node(fleet: Sandbox, host: object, work: Path, extra: str = "") -> Node:
    node = Node(fleet, host, work, free_port(host.address))  # type: ignore[attr-defined]
    node.host.set_standin(**KNOBS)
    text = incident_unit(node.host.address, node.port).replace("--trust-remote-code", f"--trust-remote-code{extra}")
    node.install(text)
    node.wait_healthy(deadline=60)
    return node


def test_a_lingering_0523_tp8_oom_is_fixed_from_its_line(sandbox_fleet: Sandbox, fresh_hosts, tmp_path: Path) -> None:
    (host,) = fresh_hosts(1)
    node = _node(sandbox_fleet, host, tmp_path)
    inventory = write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, [node.host])
    watch = _Watch(inventory, tmp_path)
    answers: list[object] = []
    try:
        poll(lambda: (watch.state / "watch.db").exists(), deadline=60, what="the watcher's state")
        for seed in (1, 2):
            assert node.generate(2000, seed).status == 200
        before = node.show("InvocationID")["InvocationID"]
        prefill = threading.Thread(target=lambda: answers.append(node.generate(32768, 3).status))
        prefill.start()
        poll(lambda: watch.events("outcome"), deadline=120, what="the fix's outcome")
        prefill.join(timeout=60)
        (outcome,) = watch.events("outcome")
        assert outcome["outcome"] == "remediated", outcome
        assert outcome.get("lingering") == "ended", outcome
        node.wait_healthy(deadline=60)
        journal = "\n".join(node.journal())
        assert "Waiting 60.0 seconds for CUDA coredumps before exiting." in journal, journal[-3000:]
        # The linger was cut: the handler never reached its own kill_process_tree.
        assert "include_parent=True" not in journal, journal[-3000:]
        (detected,) = watch.events("detected")
        assert "line of the running invocation" in str(detected["reason"]), detected
        assert [c["key"] for c in detected["crashes"]] == [before]  # type: ignore[union-attr]
        # Let the watcher read the old invocation's end (the stop job's exit) and the new start.
        poll(lambda: node.show("InvocationID")["InvocationID"] != before, deadline=30, what="the new invocation")
        threading.Event().wait(5)  # two rounds of the watcher (--interval 2s) over what came after the fix
        assert len(watch.events("detected")) == 1 and len(watch.events("decided")) == 1, watch.events()
        backups = node.host.run("sh", "-c", f"ls {UNIT_PATH}.bak.* 2>/dev/null").stdout.split()
        assert len(backups) == 1, backups
        lines = node.journal()
        crash = next(i for i, line in enumerate(lines) if "SIGQUIT received" in line)
        after = lines[crash:]
        assert len([x for x in after if x.startswith(f"Started {UNIT}")]) == 1, after  # the fix's start only
        assert not [x for x in after if "Scheduled restart job" in x], after  # no auto-restart of the old one
        assert [x for x in after if x.startswith(f"Stopping {UNIT}")], after  # its end was a stop job's
        assert int(node.show("NRestarts")["NRestarts"]) == 0
    finally:
        watch.stop()
    assert watch.proc.returncode == 0, watch.log.read_text()[-3000:]
    status = subprocess.run(remediate_argv("watch", "status", "--json", "--state-dir", str(watch.state)),
                            cwd=tmp_path, capture_output=True, text=True, timeout=60, env=_cli_env())  # fmt: skip
    incidents = json.loads(status.stdout)["incidents"]
    assert len(incidents) == 1 and incidents[0]["outcome"] == "remediated", incidents


def test_the_crash_text_as_request_text_starts_nothing(sandbox_fleet: Sandbox, fresh_hosts, tmp_path: Path) -> None:
    (host,) = fresh_hosts(1)
    node = _node(sandbox_fleet, host, tmp_path, extra=" --log-requests")
    inventory = write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, [node.host])
    for line in CRASH_TEXT.splitlines():
        assert node.http("POST", "/generate", {"text": line, "sampling_params": {"max_new_tokens": 4}}).status == 200
    journal = "\n".join(node.journal())
    assert "Receive: obj=GenerateReqInput(text='[2026-12-05 03:12:09 TP3] Scheduler hit an exception" in journal
    out = subprocess.run(remediate_argv("watch", "run", "all", "-i", str(inventory), "--once", "--state-dir",
                                        str(tmp_path / "state")), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=_cli_env())  # fmt: skip
    assert out.returncode == 0, out.stderr
    audit = tmp_path / "state" / "watch-audit.jsonl"
    events = [json.loads(x)["event"] for x in audit.read_text().splitlines()] if audit.exists() else []
    assert "detected" not in events and "unconfirmed" not in events, events
    assert node.show("ActiveState")["ActiveState"] == "active" and node.healthy()
