"""`remediate watch`: the time from the crash to a server that serves again (docs/internals/PERFORMANCE.md).

One sandbox host (systemd in nspawn, real sshd) runs the incident's unit (TP8, `Restart=on-failure`,
`RestartSec=10`) on the sglang stand-in at ``time_scale`` 1 (simulated seconds are wall seconds), once per
engine version and model load:

- ``0.5.23``: the OOM lingers (the SIGQUIT handler's 5 s settle, dumps, 60 s coredump wait; the HTTP server
  silent, the unit active): the watcher acts on torch's OOM line, confirmed by the silent health endpoint;
- ``0.5.5``: the process exits at once: the watcher acts on systemd's exit lines.

The watcher is the CLI (``remediate watch run``, its default policy, the journal followed) in a subprocess with a
fresh state; two 2,000-token requests then the 32k prefill crash the server. Measured: torch's OOM line (its
journal ``__REALTIME_TIMESTAMP``) → the ``decided`` record in the watcher's audit (the bench tails the file
every 20 ms) and → the first ``/health`` 200 of the fixed server (polled every 50 ms from outside the host).
The load is the stand-in's ``load_s`` + ``warmup_s`` (the restart → healthy of a fresh server). Goals: → decided
≤ 2 s; → healthy ≤ load + 5 s. The unit is put back between runs. Every process started is stopped by PID.

    .venv/bin/python bench/watch_mttr.py [--versions 0.5.23,0.5.5] [--loads 3,60] [--reps 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

UNIT = "sglang.service"
GOAL_DECIDED_S = 2.0
GOAL_OVER_LOAD_S = 5.0
WARMUP_S = 1.0  # the stand-in's warm-up after its port opens (simulated s); the rest of the load is load_s


def _ready(path: Path, proc: subprocess.Popen[str], deadline: float) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.2)
    try:
        while b"READY=1" not in _recv(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the watcher never said READY=1: {proc.stderr.read() if proc.stderr else ''}")
    finally:
        sock.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(4096)
    except TimeoutError:
        return b""


def _health_200(address: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/health", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _oom_line_at(host: Any, invocation: str) -> float:
    out = host.run("journalctl", "-u", UNIT, "-o", "json", "--no-pager", f"_SYSTEMD_INVOCATION_ID={invocation}").stdout
    for line in out.splitlines():
        doc = json.loads(line)
        message = doc.get("MESSAGE") if isinstance(doc.get("MESSAGE"), str) else ""
        if "CUDA out of memory" in message:
            return int(doc["__REALTIME_TIMESTAMP"]) / 1e6
    raise SystemExit(f"{host.name}: no torch OOM line in invocation {invocation}")


def one_run(fleet: Any, host: Any, node: Any, work: Path, version: str, load: float) -> dict[str, Any]:
    from sandbox.units import incident_unit

    host.set_standin(time_scale=1.0, api_version=version, load_s=load - WARMUP_S, warmup_s=WARMUP_S)
    host.install_unit(UNIT, incident_unit(host.address, node.port))
    node.wait_healthy(deadline=load + 120)
    run = work / f"run-{version}-{load:g}"
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env.update(NOTIFY_SOCKET=str(run / "notify"), REMEDIATE_STATE_DIR=str(run / "controller"))
    argv = [sys.executable, "-m", "remediate", "watch", "run", host.name, "--ssh-config", str(fleet.ssh_config),
            "--state-dir", str(run / "state"), "--wait-timeout", str(int(load + 300))]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, cwd=run, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        _ready(run / "notify", proc, time.monotonic() + 60)
        time.sleep(3)  # its first round: the host read, its journal followed
        for seed in (1, 2):
            if node.generate(2000, seed).status != 200:
                raise SystemExit(f"{host.name}: the 2,000-token requests failed")
        invocation = host.show(UNIT, "InvocationID")["InvocationID"]
        threading.Thread(target=node.generate, args=(32768, 3), daemon=True).start()
        audit, decided, acted = run / "state" / "watch-audit.jsonl", None, None
        end = time.monotonic() + load + 400
        while decided is None or acted is None:
            if time.monotonic() > end or proc.poll() is not None:
                raise SystemExit(f"{version} load {load:g}: no decision in time")
            now = time.time()
            events = [json.loads(x)["event"] for x in audit.read_text().splitlines()] if audit.exists() else []
            decided = decided or (now if "decided" in events else None)
            acted = acted or (now if "acted" in events else None)
            time.sleep(0.02)
        while not _health_200(host.address, node.port):
            if time.monotonic() > end:
                raise SystemExit(f"{version} load {load:g}: not healthy in time")
            time.sleep(0.05)
        healthy = time.time()
        oom = _oom_line_at(host, invocation)
        events = [json.loads(x) for x in audit.read_text().splitlines()]
        detected = next(e for e in events if e["event"] == "detected")
        return {
            "version": version,
            "load_s": load,
            "decided_s": round(decided - oom, 2),
            "healthy_s": round(healthy - oom, 2),
            "over_load_s": round(healthy - oom - load, 2),
            "told_by": "fatal line" if "line of the running invocation" in str(detected["reason"]) else "exit",
        }
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=load + 330)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--versions", default="0.5.23,0.5.5")
    parser.add_argument("--loads", default="3,60")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from sandbox import Sandbox
    from sandbox.host import free_address_block
    from sandbox.units import free_port
    from tests.support.node import Node

    reason = Sandbox.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="watch-mttr-") as tmp:
        work = Path(tmp)
        fleet = Sandbox(work / "sandbox", 1, first_address=free_address_block(1, 47))
        fleet.start()
        try:
            host = fleet.hosts[0]
            node = Node(fleet, host, work, free_port(host.address))
            for version in args.versions.split(","):
                for load in (float(x) for x in args.loads.split(",")):
                    for rep in range(args.reps):
                        (work / f"rep{rep}").mkdir(exist_ok=True)
                        row = one_run(fleet, host, node, work / f"rep{rep}", version, load)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        host.systemctl("stop", UNIT)
                        host.systemctl("reset-failed", UNIT)
        finally:
            fleet.stop()
    print()
    print(f"{'engine':<22} {'load s':>7} {'OOM line → decided s':>21} {'→ healthy s':>12} {'healthy − load s':>17}")
    for r in rows:
        engine = f"sglang {r['version']} ({r['told_by']})"
        print(
            f"{engine:<22} {r['load_s']:>7g} {r['decided_s']:>21.2f} {r['healthy_s']:>12.2f} {r['over_load_s']:>17.2f}"
        )
    print(f"goals: → decided ≤ {GOAL_DECIDED_S:g} s; → healthy ≤ load + {GOAL_OVER_LOAD_S:g} s")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
