"""Issue 32 on real systemd: with `remediate watch run` following three sandbox hosts (the stand-in as sglang
0.5.6, which ends every graceful stop by SIGKILLing itself), planned restarts and stops — a person's `remediate
oom` and `rollback` of two healthy hosts, a `systemctl restart`, a `systemctl stop` (the unit left failed,
Result=signal) and `start` — are no crash: no `detected`, no breaker, no incident; a real 32k-prefill OOM on the
third host right after is fixed. And the server's own words are never systemd's: a request quoting systemd's exit
lines (`--log-requests`) and a line the service writes as ``SYSLOG_IDENTIFIER=systemd`` (UNIT=, a stop job's
MESSAGE_ID, a forged _PID) on two of three hosts make no crash and no breaker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxHost
from sandbox.units import free_port, incident_unit
from tests.support.fleet import write_inventory
from tests.support.node import FAST_KNOBS, UNIT, UNIT_PATH, Node, poll, remediate_argv, run_cli
from tests.support.watch import spoof_systemd_line

pytestmark = pytest.mark.e2e
QUOTES = (
    "sglang.service: Main process exited, code=killed, status=9/KILL",
    "sglang.service: Failed with result 'signal'.",
)


class Watcher:
    """`remediate watch run` over the hosts as a subprocess (journal followed), stopped by PID."""

    def __init__(self, nodes: list[Node], inventory: Path, work: Path, *, follow: bool = True) -> None:
        self.nodes, self.inventory, self.state = nodes, inventory, work / "watch-state"
        self.follow = follow
        argv = remediate_argv("watch", "run", "all", "-i", str(inventory), "--interval", "0.5s")
        argv += [] if follow else ["--no-follow"]
        argv += ["--state-dir", str(self.state), "--wait-timeout", "60"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
        env.update(REMEDIATE_STATE_DIR=str(work / "controller"), COLUMNS="200")
        self.log = work / "watcher.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=log, start_new_session=True)

    def events(self) -> list[dict[str, object]]:
        audit = self.state / "watch-audit.jsonl"
        return [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []

    def caught_up(self) -> None:
        """Wait until the watcher has read every host's journal past its last line: systemd's (PID 1's) last
        line about the unit when following (a followed host is polled when systemd speaks, only then), else
        the unit's last line of any writer (a host is polled every interval)."""
        from remediate.controller.watch_state import WatchState

        def seq(cursor: str | None) -> int:
            fields = dict(p.partition("=")[::2] for p in (cursor or "").split(";"))
            return int(fields.get("i", "0"), 16)

        def done() -> bool:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            if not (self.state / "watch.db").exists():
                return False
            db = WatchState(self.state)
            try:
                for node in self.nodes:
                    which = ("_PID=1", f"UNIT={UNIT}") if self.follow else ("-u", UNIT)
                    out = node.host.run("journalctl", *which, "-n", "1", "-o", "json").stdout
                    last = json.loads(out)["__CURSOR"] if out.strip() else None
                    if seq(db.cursor(node.host.name, UNIT)) < seq(last):
                        return False
                return True
            finally:
                db.close()

        poll(done, deadline=60, what="the watcher's cursor past systemd's last line on every host", every=0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _nodes(fleet: Sandbox, hosts: list[SandboxHost], work: Path, extra: str = "", service: str = "") -> list[Node]:
    nodes = [Node(fleet, h, work, free_port(h.address)) for h in hosts]

    def install(node: Node) -> None:
        node.host.set_standin(**FAST_KNOBS)
        text = incident_unit(node.host.address, node.port)
        text = text.replace("--trust-remote-code", f"--trust-remote-code{extra}")
        node.install(text.replace("[Service]\n", f"[Service]\n{service}"))

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(install, nodes))
    return nodes


@pytest.fixture
def three(sandbox_fleet: Sandbox, fresh_hosts, tmp_path: Path) -> Iterator[tuple[list[SandboxHost], Path]]:
    hosts = fresh_hosts(3)
    assert len(hosts) == 3, "needs three sandbox hosts"
    yield hosts, write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, hosts)


def _crash(node: Node) -> None:
    for seed in (1, 2):
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should kill the stand-in"


def _kinds(events: list[dict[str, object]]) -> list[object]:
    return [e["event"] for e in events]


def test_planned_restarts_and_stops_are_no_crash_and_a_real_oom_after_them_is_fixed(
    sandbox_fleet: Sandbox, three: tuple[list[SandboxHost], Path], tmp_path: Path
) -> None:
    hosts, inventory = three
    nodes = _nodes(sandbox_fleet, hosts, tmp_path)
    a, b, c = nodes
    original = {n.host.name: n.bytes(UNIT_PATH) for n in nodes}
    watcher = Watcher(nodes, inventory, tmp_path)
    try:
        watcher.caught_up()
        # A person's rollout to two healthy hosts, then its rollback: four restarts that SIGKILL the old server.
        for verb in ("oom", "rollback"):
            run = run_cli(remediate_argv(verb, a.host.name, b.host.name, "-i", str(inventory), "--json"),
                          cwd=tmp_path, timeout=300)  # fmt: skip
            assert run.returncode == 0, run
            want = {"remediated" if verb == "oom" else "restored"}
            assert {r["outcome"] for r in (run.document or {}).get("results", [])} == want, run
        assert "Main process exited, code=killed, status=9/KILL" in "\n".join(a.journal())
        # By hand: a restart, and a maintenance stop (the unit left failed, Result=signal) then a start.
        assert a.host.systemctl("restart", UNIT).returncode == 0
        b.host.systemctl("stop", UNIT)
        assert b.show("ActiveState", "Result") == {"ActiveState": "failed", "Result": "signal"}
        watcher.caught_up()
        assert b.host.systemctl("start", UNIT).returncode == 0
        a.wait_healthy()
        b.wait_healthy()
        watcher.caught_up()
        planned = watcher.events()
        assert "detected" not in _kinds(planned) and "breaker" not in _kinds(planned), planned

        # A real OOM on the third host right after: detected, fixed (the breaker never counted the restarts).
        _crash(c)
        poll(lambda: any(e["event"] == "outcome" for e in watcher.events()), deadline=120, what="the fix's outcome")
        events = watcher.events()
        assert {e.get("host") for e in events if e["event"] == "detected"} == {c.host.name}, events
        assert "breaker" not in _kinds(events), events
        outcome = next(e for e in events if e["event"] == "outcome")
        assert outcome["host"] == c.host.name and outcome["outcome"] == "remediated", outcome
        status = json.loads(run_cli(remediate_argv("watch", "status", "--json", "--state-dir", str(watcher.state)),
                                    cwd=tmp_path).stdout)  # fmt: skip
        assert status["breaker"] is None and [i["host"] for i in status["incidents"]] == [c.host.name], status
        c.wait_healthy()
        assert c.generate(32768, 3).status == 200
        assert [a.bytes(UNIT_PATH), b.bytes(UNIT_PATH)] == [original[a.host.name], original[b.host.name]]
    finally:
        watcher.stop()


def _spoof(node: Node) -> None:
    """A line from the service's own cgroup, claiming every systemd field a client can set."""
    out = spoof_systemd_line(node)
    assert out.returncode == 0, out.stderr


def test_the_servers_words_quoting_systemd_are_no_crash(
    sandbox_fleet: Sandbox, three: tuple[list[SandboxHost], Path], tmp_path: Path
) -> None:
    hosts, inventory = three
    # --log-requests: each request's text in the journal; one unit's whole output as SYSLOG_IDENTIFIER=systemd.
    nodes = _nodes(sandbox_fleet, hosts, tmp_path, extra=" --log-requests", service="SyslogIdentifier=systemd\n")
    watcher = Watcher(nodes, inventory, tmp_path, follow=False)  # polled every interval: it reads every line
    try:
        watcher.caught_up()
        for node in nodes[:2]:
            for text in QUOTES:
                body = {"text": text, "sampling_params": {"max_new_tokens": 4}}
                assert node.http("POST", "/generate", body).status == 200
            _spoof(node)
        journal = "\n".join(nodes[0].journal())
        assert all(f"Receive: obj=GenerateReqInput(text={q!r}" in journal for q in QUOTES), journal[-3000:]
        raw = nodes[0].host.run("journalctl", "-u", UNIT, "-o", "json", "--no-pager").stdout
        forged = [json.loads(x) for x in raw.splitlines() if '"JOB_TYPE":"stop"' in x.replace(" ", "")]
        assert forged and all(d["_PID"] != "1" and d["SYSLOG_IDENTIFIER"] == "systemd" for d in forged)
        watcher.caught_up()
        events = watcher.events()
        assert "detected" not in _kinds(events) and "breaker" not in _kinds(events), events
        assert all(n.show("ActiveState")["ActiveState"] == "active" for n in nodes)
    finally:
        watcher.stop()


VLLM = "vllm.service"


def test_vllm_stops_by_exit_0_logs_prompts_by_version_and_neither_is_a_crash(node: Node, tmp_path: Path) -> None:
    """The vLLM stand-in as the versions it claims: SIGTERM → FastAPI's and uvicorn's shutdown lines, exit 0
    (the unit inactive, Result=success); requests logged with their prompt under --enable-log-requests at
    0.11.0 (off without it), by default at 0.8.5. A restart, a stop + start and a prompt quoting systemd's
    exit lines make no `detected`."""
    from tests.support.vllm import vllm_unit as _unit

    def install(flags: str = "") -> None:
        text = _unit(node, "0.94").replace("--max-num-batched-tokens 16384", f"--max-num-batched-tokens 4096{flags}")
        node.install(text, name=VLLM)
        node.wait_healthy(VLLM)

    def prompt(text: str) -> None:
        assert node.http("POST", "/v1/completions", {"model": "m", "prompt": text, "max_tokens": 2}).status == 200

    def received(text: str) -> bool:
        return any("Received request cmpl-" in line and f"prompt: {text!r}" in line for line in node.journal(VLLM))

    node.host.set_standin(**FAST_KNOBS)
    install()
    prompt("quiet by default")
    assert not received("quiet by default"), "0.11.0 logs no request without --enable-log-requests"
    node.host.set_standin(**FAST_KNOBS, vllm_version="0.8.5")
    assert node.host.systemctl("restart", VLLM).returncode == 0
    node.wait_healthy(VLLM)
    prompt("logged at 0.8.5")
    poll(lambda: received("logged at 0.8.5"), deadline=10, what="0.8.5's request line")
    node.host.set_standin(**FAST_KNOBS)
    install(" --enable-log-requests")

    state = tmp_path / "watch-state"
    first = node.cli("watch", "--once", "--state-dir", str(state), "--unit", VLLM, json_out=False)
    assert first.returncode == 0, first
    for text in (f"{VLLM}: Main process exited, code=killed, status=9/KILL", f"{VLLM}: Failed with result 'signal'."):
        prompt(text)
        poll(lambda text=text: received(text), deadline=10, what="the request's line")
    assert node.host.systemctl("restart", VLLM).returncode == 0
    node.wait_healthy(VLLM)
    assert node.host.systemctl("stop", VLLM).returncode == 0
    show = node.show("ActiveState", "Result", "ExecMainStatus", unit=VLLM)
    assert show == {"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, show  # not 'signal'
    tail = node.journal(VLLM)[-8:]
    shutdown = ("Shutting down FastAPI HTTP server.", "INFO:     Shutting down", "Application shutdown complete.")
    assert all(any(s in line for line in tail) for s in shutdown), tail
    assert node.host.systemctl("start", VLLM).returncode == 0
    node.wait_healthy(VLLM)
    run = node.cli("watch", "--once", "--state-dir", str(state), "--unit", VLLM, json_out=False)
    assert run.returncode == 0, run
    events = (state / "watch-audit.jsonl").read_text().splitlines() if (state / "watch-audit.jsonl").exists() else []
    assert not [e for e in map(json.loads, events) if e["event"] == "detected"], events
    assert run.stdout == "", "nothing to say: every stop was planned, every quote a request"
