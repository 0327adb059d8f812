"""The watcher's chaos run (issue 22): sandbox hosts running the incident's sglang unit, `remediate watch` as a
real subprocess with short intervals, and, for a bounded time, faults injected at random (seeded):

- ``crash``: the 32k prefill (after two 2k ones) on a healthy host: the stand-in dies of a runtime CUDA OOM
  while its unit has the incident's flags; on a fixed host the request is served (``survived``);
- ``startup``: a neighbour process holding 12 GiB on GPU 5 (stand-in knob) and a restart of the unit: the
  server dies at startup (``The memory capacity is unbalanced``); the neighbour is gone again before the unit's
  own ``Restart=`` brings the server back 10 s later;
- ``cut``: every sshd session process on the host is SIGKILLed by PID (the watcher's kept connection, and a
  fix's, if one runs; half of the cuts wait for a fix in flight and cut that host): the listener stays;
- ``restart``: the watcher is SIGKILLed or SIGTERMed (by PID) and started again on the same state (half of
  the time once a fix is in flight);
- one ``burst`` at a random moment: ``breaker_count + 1`` hosts crashed at once, so that the breaker's
  threshold is crossed at least once;
- ``planned`` (issue 32): a restart systemd runs, never a crash: a person's `remediate oom` of a healthy host
  then its `rollback` (from another controller's state: a rollout and its undo), a `systemctl restart`, or a
  `systemctl stop` (the unit left failed, Result=signal) then `start`; the stand-in is sglang 0.5.6, which
  ends each of these stops by SIGKILLing itself (systemd: ``Main process exited, code=killed,
  status=9/KILL``, ``Failed with result 'signal'``);
- ``quote``: a request whose text quotes those two lines (the unit runs with ``--log-requests``: the server
  logs it), and a line the service writes to journald as ``SYSLOG_IDENTIFIER=systemd`` with ``UNIT=`` and a
  stop job's fields: no crash either.

Some hosts are fated to roll back (knob ``failure: exit_at_once`` matched on the fix's
``--chunked-prefill-size``: the fixed server never starts). After the injections the watcher runs until it is
quiet, then is stopped; ``watch_chaos_check.check`` reads what it left. Every process started here is stopped
by PID (``Chaos.close``). Used by ``tests/e2e/test_watch_chaos.py`` (6 hosts) and ``bench/watch_chaos.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox import Sandbox, SandboxHost
from sandbox.units import free_port, incident_unit, wait_http_ok
from tests.support.node import FAST_KNOBS, UNIT, UNIT_PATH, Node
from tests.support.watch import spoof_systemd_line

ROLLBACK_KNOBS = {"failure": "exit_at_once", "failure_match": "--chunked-prefill-size"}
NEIGHBOUR = {"pid": 4242, "gib": 12, "gpus": [5]}  # unbalanced TP memory: the server dies at startup
ACTIONS = (("crash", 0.35), ("startup", 0.12), ("cut", 0.2), ("restart", 0.12), ("planned", 0.13), ("quote", 0.08))
PLANNED = ("oom+rollback", "restart", "stop+start")
QUOTES = ("Main process exited, code=killed, status=9/KILL", "Failed with result 'signal'.")


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    duration_s: float
    interval_s: float = 0.5
    breaker_count: int = 3  # the breaker trips when MORE than this many hosts crashed within the window
    breaker_window_s: float = 20.0
    rollback_share: float = 0.2
    gap_s: tuple[float, float] = (0.3, 1.5)  # between two injections
    settle_s: float = 180.0  # bound on the quiet-down after the injections
    wait_timeout_s: float = 60.0
    burst_at: tuple[float, float] = (0.4, 0.7)  # share of the duration at which the burst comes
    mid_fix_wait_s: float = 3.0  # how long a cut or a restart aimed at a fix in flight waits for one


@dataclass
class Injection:
    at: float
    kind: str
    host: str | None
    result: str
    started: float | None = None  # a planned restart's or a quote's start (no crash of the host from then to ``at``)


@dataclass
class Lifetime:
    pid: int
    started: float
    ended: float | None = None
    how: str | None = None  # SIGKILL, SIGTERM


@dataclass
class Chaos:
    fleet: Sandbox
    hosts: list[SandboxHost]
    work: Path
    config: ChaosConfig
    nodes: list[Node] = field(default_factory=list)
    original: dict[str, bytes] = field(default_factory=dict)
    fated: set[str] = field(default_factory=set)
    injections: list[Injection] = field(default_factory=list)
    lifetimes: list[Lifetime] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.config.seed)
        self.state = self.work / "watch-state"
        self.controller = self.work / "controller-state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.controller.mkdir(parents=True, exist_ok=True)
        self.busy_until: dict[str, float] = {}

    # -- set up ------------------------------------------------------------------------------------------
    def knobs(self, name: str, **extra: Any) -> dict[str, Any]:
        return {**FAST_KNOBS, **(ROLLBACK_KNOBS if name in self.fated else {}), **extra}

    def prepare(self) -> None:
        names = [h.name for h in self.hosts]
        self.fated = set(self.rng.sample(names, max(1, round(len(names) * self.config.rollback_share))))

        def one(host: SandboxHost) -> Node:
            host.set_standin(**self.knobs(host.name))
            node = Node(self.fleet, host, self.work, free_port(host.address))
            text = incident_unit(host.address, node.port).replace(
                "--trust-remote-code", "--trust-remote-code --log-requests"
            )
            host.install_unit(UNIT, text)
            if not wait_http_ok(host.address, node.port):
                raise RuntimeError(f"{host.name}: the incident server did not get healthy")
            self.original[host.name] = text.encode()
            return node

        with ThreadPoolExecutor(max_workers=6) as pool:
            self.nodes = list(pool.map(one, self.hosts))
        c = self.config
        (self.work / "policy.yaml").write_text(
            "cap_per_day: 1\ncooldown: 1h\nfold_window: 10m\nlookback: 10m\n"
            f"breaker: {{count: {c.breaker_count}, window: {c.breaker_window_s:g}s}}\n"
        )

    # -- the watcher -------------------------------------------------------------------------------------
    def start_watcher(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
        env.update(REMEDIATE_STATE_DIR=str(self.controller), COLUMNS="200")
        argv = [sys.executable, "-m", "remediate", "watch", "run", *(n.host.name for n in self.nodes)]
        argv += ["--ssh-config", str(self.fleet.ssh_config), "--interval", f"{self.config.interval_s:g}s"]
        argv += ["--policy", str(self.work / "policy.yaml"), "--state-dir", str(self.state)]
        argv += ["--wait-timeout", f"{self.config.wait_timeout_s:g}"]
        log = open(self.work / "watcher.log", "ab")  # noqa: SIM115 - the child keeps it; closed right after
        try:
            self.proc = subprocess.Popen(argv, env=env, cwd=self.work, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        self.lifetimes.append(Lifetime(self.proc.pid, time.time()))

    def stop_watcher(self, sig: signal.Signals, timeout: float = 120) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                sig = signal.SIGKILL
        self.lifetimes[-1].ended, self.lifetimes[-1].how = time.time(), sig.name
        self.proc = None

    def close(self) -> None:
        """Stop the watcher (by PID) if it still runs; the hosts belong to the caller."""
        self.stop_watcher(signal.SIGKILL)

    # -- faults ------------------------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.host.name == name)

    def ready(self, node: Node) -> bool:
        if time.monotonic() < self.busy_until.get(node.host.name, 0.0):
            return False
        try:
            return node.show("ActiveState")["ActiveState"] == "active" and node.healthy()
        except (AssertionError, subprocess.SubprocessError, ValueError):
            return False

    def note(self, kind: str, host: str | None, result: str, started: float | None = None) -> None:
        self.injections.append(Injection(time.time(), kind, host, result, started))

    def crash(self, node: Node) -> str:
        if not self.ready(node):
            return "skipped"
        for seed in (1, 2):
            if node.generate(2000, self.rng.randrange(10**6) * 4 + seed).status != 200:
                return "skipped"
        result = node.generate(32768, self.rng.randrange(10**6) * 4 + 3)
        if result.status == 200:
            return "survived"  # a fixed unit serves the request that crashed the incident's
        self.busy_until[node.host.name] = time.monotonic() + 12  # Restart= brings it back after 10 s
        return "crashed" if result.status is None else f"status {result.status}"

    def startup(self, node: Node) -> str:
        if not self.ready(node):
            return "skipped"
        name = node.host.name

        def failures() -> int:  # this start's failure, not an earlier one still in the journal's tail
            return sum("memory capacity is unbalanced" in line for line in node.journal())

        before = failures()
        node.host.set_standin(**self.knobs(name, neighbour=NEIGHBOUR))
        try:
            node.host.systemctl("restart", UNIT)
            end = time.monotonic() + 20
            while failures() <= before:
                if time.monotonic() > end:
                    return "no failure seen"
                time.sleep(0.1)
        finally:
            node.host.set_standin(**self.knobs(name))
        self.busy_until[name] = time.monotonic() + 12
        return "failed at startup"

    def cut(self, node: Node) -> str:
        out = node.host.run("ps", "-eo", "pid=,args=").stdout
        pids = [
            line.split(None, 1)[0]
            for line in out.splitlines()
            if " sshd: " in f" {line.strip().split(None, 1)[-1]}" and "[listener]" not in line
        ]
        if pids:
            node.host.run("kill", "-9", *pids)
        return f"{len(pids)} session(s) killed"

    def planned(self, node: Node) -> str:
        """A restart or stop systemd itself runs (a person's, a deploy's), on a healthy host no fix is running on:
        `oom` + `rollback` only on a host with its old bytes that is not fated to roll back (the pair leaves
        its bytes as they were, the watcher's record of the host true)."""
        name = node.host.name
        if not self.ready(node) or self._fixing(name):
            return "skipped"
        old = node.bytes(UNIT_PATH) == self.original[name] and name not in self.fated
        how = self.rng.choice(PLANNED if old else PLANNED[1:])
        if how == "oom+rollback":
            env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
            env.update(REMEDIATE_STATE_DIR=str(self.work / "person-state"), COLUMNS="200")
            for verb in ("oom", "rollback"):
                argv = [sys.executable, "-m", "remediate", verb, name, "--ssh-config", str(self.fleet.ssh_config)]
                run = subprocess.run(argv + ["--wait-timeout", "60"], env=env, cwd=self.work, capture_output=True,
                                     timeout=300)  # fmt: skip
                if run.returncode != 0:
                    return f"{verb} exit {run.returncode}"
        elif how == "restart":
            node.host.systemctl("restart", UNIT)
        else:
            node.host.systemctl("stop", UNIT)
            node.host.systemctl("start", UNIT)
        end = time.monotonic() + 30
        while not (node.show("ActiveState")["ActiveState"] == "active" and node.healthy()):
            if time.monotonic() > end:
                return f"{how}: not healthy after"
            time.sleep(0.1)
        return how

    def quote(self, node: Node) -> str:
        """Request text quoting systemd's exit lines, and a line the service writes as systemd: no crash."""
        if not self.ready(node):
            return "skipped"
        for text in QUOTES:
            body = {"text": f"{UNIT}: {text}", "sampling_params": {"max_new_tokens": 2}}
            if node.http("POST", "/generate", body).status != 200:
                return "skipped"
        out = spoof_systemd_line(node)
        return "quoted" if out.returncode == 0 else f"spoof exit {out.returncode}"

    def _fixing(self, host: str) -> bool:
        from remediate.controller.watch_state import WatchState

        db = WatchState(self.state)
        try:
            return any(str(r["host"]) == host and r["outcome"] == "remediating" for r in db.incidents(limit=50))
        finally:
            db.close()

    def restart(self) -> str:
        """Stop the watcher (SIGKILL or SIGTERM, by PID) and start another on the same state; half of the
        time it first waits (``mid_fix_wait_s``) for a fix in flight, so that the stop lands mid-fix."""
        sig = self.rng.choice((signal.SIGKILL, signal.SIGTERM))
        mid_fix = self.rng.random() < 0.5 and self._fix_in_flight(self.config.mid_fix_wait_s) is not None
        self.stop_watcher(sig, timeout=self.config.wait_timeout_s + 30)
        self.start_watcher()
        return f"{sig.name}{' mid-fix' if mid_fix else ''}"

    def _fix_in_flight(self, deadline: float) -> str | None:
        """The host of a fix in flight (watch.db says ``remediating``), waited for up to ``deadline`` s."""
        from remediate.controller.watch_state import WatchState

        end = time.monotonic() + deadline
        while time.monotonic() < end:
            db = WatchState(self.state)
            try:
                hosts = [str(r["host"]) for r in db.incidents(limit=50) if r["outcome"] == "remediating"]
            finally:
                db.close()
            if hosts:
                return hosts[0]
            time.sleep(0.1)
        return None

    def burst(self) -> None:
        want = self.config.breaker_count + 1
        old = [n for n in self.nodes if n.bytes(UNIT_PATH) == self.original[n.host.name]]  # the 32k kills these
        end = time.monotonic() + 15  # a host crashed just before comes back within its RestartSec (10 s)
        while len(crashable := [n for n in old if self.ready(n)]) < want and time.monotonic() < end:
            time.sleep(0.5)
        chosen = self.rng.sample(crashable, min(len(crashable), want))
        with ThreadPoolExecutor(max_workers=len(chosen) or 1) as pool:
            results = list(pool.map(self.crash, chosen))
        for n, r in zip(chosen, results, strict=True):
            self.note("burst", n.host.name, r)

    def inject(self) -> None:
        c = self.config
        start = time.monotonic()
        end = start + c.duration_s
        burst_at = start + self.rng.uniform(*c.burst_at) * c.duration_s
        kinds, weights = zip(*ACTIONS, strict=True)
        while time.monotonic() < end:
            if burst_at is not None and time.monotonic() >= burst_at:
                self.burst()
                burst_at = None  # type: ignore[assignment]
                continue
            kind = self.rng.choices(kinds, weights)[0]
            node = self.rng.choice(self.nodes)
            if kind == "cut" and self.rng.random() < 0.5:  # half of the cuts wait for a fix to cut into
                fixing = self._fix_in_flight(self.config.mid_fix_wait_s)
                if fixing is not None:
                    self.note(kind, fixing, f"{self.cut(self.node(fixing))} mid-fix")
                    time.sleep(self.rng.uniform(*c.gap_s))
                    continue
            if kind == "restart":
                self.note(kind, None, self.restart())
            elif kind in ("planned", "quote"):
                started = time.time()
                self.note(kind, node.host.name, getattr(self, kind)(node), started)
            else:
                self.note(kind, node.host.name, getattr(self, kind)(node))
            time.sleep(self.rng.uniform(*c.gap_s))
        if burst_at is not None:
            self.burst()

    # -- the end -----------------------------------------------------------------------------------------
    def settle(self) -> bool:
        """Let the watcher finish what it started: every host's server up, no fix in flight, the audit log
        unchanged for a few rounds. Then SIGTERM it. True when it got quiet within ``settle_s``."""
        from remediate.controller.watch_state import WatchState

        end = time.monotonic() + self.config.settle_s
        audit = self.state / "watch-audit.jsonl"
        quiet_since, size = time.monotonic(), -1
        quiet = False
        while time.monotonic() < end:
            if self.proc is None or self.proc.poll() is not None:
                self.start_watcher()  # the last restart's new watcher died: start another
            now_size = audit.stat().st_size if audit.exists() else 0
            if now_size != size:
                quiet_since, size = time.monotonic(), now_size
            db = WatchState(self.state)
            try:
                in_flight = [r for r in db.incidents(limit=500) if r["outcome"] == "remediating"]
            finally:
                db.close()
            up = all(n.show("ActiveState")["ActiveState"] == "active" for n in self.nodes)
            if up and not in_flight and time.monotonic() - quiet_since > max(3.0, 6 * self.config.interval_s):
                quiet = True
                break
            time.sleep(0.5)
        self.stop_watcher(signal.SIGTERM, timeout=self.config.wait_timeout_s + 30)
        return quiet

    def run(self) -> bool:
        self.prepare()
        self.start_watcher()
        try:
            self.inject()
            return self.settle()
        finally:
            self.close()

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.config.seed,
            "hosts": len(self.nodes),
            "fated_to_roll_back": sorted(self.fated),
            "injections": [vars(i) for i in self.injections],
            "lifetimes": [vars(x) for x in self.lifetimes],
        }


def dump(chaos: Chaos, report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps({**chaos.summary(), "report": report}, indent=2, default=str) + "\n")
