"""`remediate watch`: detection latency and the watcher's idle cost (issue 22; docs/internals/PERFORMANCE.md).

1. **Detection latency**, N sandbox hosts (systemd in nspawn, real sshd, the incident's sglang unit with the
   stand-in) watched by ``remediate watch run … --dry-run --interval I``: the 32k prefill crashes one host's
   server (a different host each repetition); latency = the host's own journal timestamp
   (``__REALTIME_TIMESTAMP``) of systemd's ``Main process exited`` line → the moment the watcher's audit log
   holds the ``detected`` and the ``decided`` record for that host (the bench tails the file every 20 ms; the
   records' own ``at`` is the round's start, so it is not used). Each crash comes after a random wait of up to
   one interval (``--seed``), so it lands anywhere in the poll cycle. ``--dry-run``: nothing is fixed.
   ``--modes``: ``follow`` (the default watcher: each host's journal followed, systemd's line wakes the poll;
   the interval is then only the fallback's) and ``poll`` (``--no-follow``: one round trip per interval).
2. **Idle cost, N sandbox hosts**: the watcher process's CPU (utime+stime from /proc/PID/stat over a window,
   as a fraction of one core), RSS and PSS (smaps_rollup), threads and sockets, healthy fleet, each interval.
3. **Idle cost, many endpoints** (``--endpoints``, default 500): one Python process of ours serves a lightweight
   SSH endpoint (paramiko server, publickey auth, its own host key, verified by the watcher through
   known_hosts) on each of M loopback addresses 127.45.x.y:2222; every exec answers the poll with a canned
   healthy ``systemctl show`` and an empty journal, and a followed journal (``--endpoint-mode follow``) with
   its marker line and then silence, the channel kept open. The watcher holds one SSH connection per address; measured
   as in 2 at ``--endpoint-interval`` (15 s); then the floor: the same connections held open by a process
   (remediate's SSHTransport) that never polls them.

The watcher learns nothing of the bench: it is the CLI in a subprocess; its rounds are counted through
``NOTIFY_SOCKET`` (the sd_notify READY/WATCHDOG it sends each round). Every process started is stopped by PID.

    .venv/bin/python bench/watch_cost.py [--hosts 20] [--modes follow,poll] [--intervals 1,5,15] [--reps 3]
        [--endpoints 500] [--endpoint-mode follow]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # sandbox/ and tests/support/ (the drivers the tests use)

GOAL_DETECT_S = 2.0
GOAL_CPU = 0.25
GOAL_MEM_MIB = 1024.0
UNIT = "sglang.service"
ENDPOINT_PORT = 2222
SHOW = (
    "ActiveState=active\nSubState=running\nResult=success\nNRestarts=0\n"
    "InvocationID=5f0c3f7e2b9d4c1a8e6f0a1b2c3d4e5f\nExecMainStatus=0\nMainPID=4242\n@@journal\n"
)


# -- the watcher process ------------------------------------------------------------------------------------
class Rounds:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET: counts the watcher's rounds."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            if data.startswith(b"STATUS=round "):
                self.times.append(time.time())

    def wait(self, n: int, timeout: float, proc: subprocess.Popen[str]) -> None:
        end = time.monotonic() + timeout
        while len(self.times) < n:
            if proc.poll() is not None:
                raise SystemExit(f"the watcher exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            if time.monotonic() > end:
                raise SystemExit(f"the watcher did not finish round {n} within {timeout:.0f}s")
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def start_watcher(
    targets: list[str], ssh_config: Path, work: Path, interval: float, rounds: Rounds, mode: str = "follow"
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env.update(NOTIFY_SOCKET=rounds.path, REMEDIATE_STATE_DIR=str(work / "controller-state"))
    argv = [sys.executable, "-m", "remediate", "watch", "run", *targets, "--ssh-config", str(ssh_config)]
    argv += ["--interval", f"{interval:g}s", "--dry-run", "--state-dir", str(work / "watch-state")]
    argv += ["--no-follow"] if mode == "poll" else []
    return subprocess.Popen(argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip


def stop_watcher(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


def _kib(path: str, key: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def idle_cost(pid: int, window: float) -> dict[str, float]:
    """CPU fraction of one core over ``window`` s, and memory, threads and sockets at its end."""
    hz = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.monotonic(), _ticks(pid)
    time.sleep(window)
    t1, c1 = time.monotonic(), _ticks(pid)
    sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return {
        "window_s": t1 - t0,
        "cpu_core": (c1 - c0) / hz / (t1 - t0),
        "rss_mib": _kib(f"/proc/{pid}/status", "VmRSS") / 1024,
        "pss_mib": _kib(f"/proc/{pid}/smaps_rollup", "Pss") / 1024,
        "threads": _kib(f"/proc/{pid}/status", "Threads"),
        "sockets": sockets,
    }


# -- 1 and 2: sandbox hosts -----------------------------------------------------------------------------------
def _exit_line_at(node: Any, since: float) -> tuple[float, float | None]:
    """(systemd's `Main process exited` line, the OOM traceback line), journal timestamps, since ``since``."""
    out = node.host.run("journalctl", "-u", UNIT, "-o", "json", "--no-pager", f"--since=@{int(since) - 1}").stdout
    exited = oom = None
    for line in out.splitlines():
        doc = json.loads(line)
        message = doc.get("MESSAGE")
        message = message if isinstance(message, str) else ""
        at = int(doc["__REALTIME_TIMESTAMP"]) / 1e6
        if at < since:
            continue
        if exited is None and "Main process exited" in message:
            exited = at
        if oom is None and "CUDA out of memory" in message:
            oom = at
    if exited is None:
        raise SystemExit(f"{node.host.name}: no `Main process exited` line after the 32k prefill")
    return exited, oom


def _audit_seen(state: Path, host: str, kinds: set[str], seen: dict[str, float], deadline: float) -> None:
    path = state / "watch-audit.jsonl"
    while set(seen) != kinds:
        now = time.time()
        if time.monotonic() > deadline:
            raise SystemExit(f"{host}: the watcher logged {sorted(seen)} of {sorted(kinds)} in time")
        if path.exists():
            for line in path.read_text().splitlines():
                event = json.loads(line)
                if event.get("host") == host and event.get("event") in kinds and event["event"] not in seen:
                    seen[event["event"]] = now
        time.sleep(0.02)


def sandbox_runs(args: argparse.Namespace, work: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from sandbox import Sandbox
    from sandbox.host import free_address_block
    from sandbox.units import free_port, incident_unit, wait_http_ok
    from tests.support.node import FAST_KNOBS, Node

    fleet = Sandbox(work / "sandbox", args.hosts, first_address=free_address_block(args.hosts, 46))
    fleet.start()
    nodes: list[Node] = []
    idle: list[dict[str, Any]] = []
    detections: list[dict[str, Any]] = []
    try:

        def prepare(host: Any) -> Node:
            host.set_standin(**FAST_KNOBS)
            port = free_port(host.address)
            host.install_unit(UNIT, incident_unit(host.address, port))
            if not wait_http_ok(host.address, port):
                raise SystemExit(f"{host.name}: the incident server did not get healthy")
            return Node(fleet, host, work, port)

        with ThreadPoolExecutor(max_workers=6) as pool:
            nodes = list(pool.map(prepare, fleet.hosts))
        fleet.wait_idle()
        victim = 0
        phase = random.Random(args.seed)
        runs = [(m, float(i)) for m in args.modes.split(",") for i in args.intervals.split(",")]
        for mode, interval in runs:
            run_dir = work / f"watch-{mode}-{interval:g}"
            run_dir.mkdir()
            rounds = Rounds(run_dir / "notify")
            proc = start_watcher([n.host.name for n in nodes], fleet.ssh_config, run_dir, interval, rounds, mode)
            try:
                rounds.wait(2, 120 + 2 * interval, proc)
                cost = idle_cost(proc.pid, max(args.idle_window, 3 * interval))
                gaps = [b - a for a, b in zip(rounds.times, rounds.times[1:], strict=False)]
                cost.update(hosts=args.hosts, mode=mode, interval_s=interval, mean_round_gap_s=statistics.mean(gaps))
                idle.append(cost)
                shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in cost.items()}
                print(json.dumps({"idle": shown}), flush=True)
                for _ in range(args.reps):
                    node = nodes[victim % len(nodes)]
                    victim += 1
                    time.sleep(phase.uniform(0, interval))  # the crash lands at a random point of the poll cycle
                    before = time.time()
                    for seed in (1, 2):
                        node.generate(2000, seed)
                    if node.generate(32768, 3).status is not None:
                        raise SystemExit(f"{node.host.name}: the 32k prefill did not kill the stand-in")
                    seen: dict[str, float] = {}
                    _audit_seen(run_dir / "watch-state", node.host.name, {"detected", "decided"}, seen,
                                time.monotonic() + 3 * interval + 60)  # fmt: skip
                    exited, oom = _exit_line_at(node, before)
                    row = {
                        "mode": mode,
                        "interval_s": interval,
                        "host": node.host.name,
                        "detected_s": seen["detected"] - exited,
                        "decided_s": seen["decided"] - exited,
                        "oom_line_before_exit_s": exited - (oom or exited),
                    }
                    detections.append(row)
                    print(
                        json.dumps({"detect": {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}}),
                        flush=True,
                    )
            finally:
                stop_watcher(proc)
                rounds.close()
            for node in nodes:  # a healthy fleet again for the next interval's idle window
                if node.host.show(UNIT, "ActiveState")["ActiveState"] != "active" or not node.healthy():
                    node.host.systemctl("reset-failed", UNIT)
                    node.host.systemctl("restart", UNIT)
                    node.wait_healthy()
            fleet.wait_idle()
    finally:
        fleet.stop()
    return idle, detections


# -- 3: many lightweight SSH endpoints --------------------------------------------------------------------------
def endpoint_address(i: int) -> str:
    return f"127.45.{i // 250}.{i % 250 + 1}"


def serve_endpoints(n: int, host_key: Path, client_pub: Path, ready: Path) -> None:
    """The endpoints' server (run as its own process): one listening socket per address, one paramiko
    transport (a thread) per accepted connection; every exec gets the canned healthy poll answer."""
    import selectors

    import paramiko

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    key = paramiko.Ed25519Key.from_private_key_file(str(host_key))
    allowed = client_pub.read_text().split()[1]

    class Server(paramiko.ServerInterface):
        def get_allowed_auths(self, username: str) -> str:
            return "publickey"

        def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
            ok = key.get_base64() == allowed
            return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

        def check_channel_request(self, kind: str, chanid: int) -> int:
            return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

        def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
            followed = b"journalctl" in command and b" -f " in command
            threading.Thread(target=follow if followed else answer, args=(channel,), daemon=True).start()
            return True

    def follow(channel: paramiko.Channel) -> None:
        """A followed journal that stays quiet (a healthy unit): the marker, then nothing until the close."""
        try:
            time.sleep(0.05)  # after the exec request's success reply (see answer)
            channel.sendall(b"@@following\n")
            while not channel.closed:
                channel.status_event.wait(5)
        finally:
            channel.close()

    def answer(channel: paramiko.Channel) -> None:
        # The client closes the channel once it has the exit status; a close from here could overtake the
        # exec request's success reply (which the transport thread sends after check_channel_exec_request
        # returns) and the client would read "Channel closed". So: data, status, EOF; the close comes late.
        try:
            channel.sendall(SHOW.encode())
            channel.send_exit_status(0)
            channel.shutdown_write()
            end = time.monotonic() + 5
            while not channel.closed and time.monotonic() < end:
                time.sleep(0.1)
        finally:
            channel.close()

    def handshake(sock: socket.socket) -> None:
        transport = paramiko.Transport(sock)
        transport.add_server_key(key)
        transport.start_server(server=Server())

    selector = selectors.DefaultSelector()
    for i in range(n):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((endpoint_address(i), ENDPOINT_PORT))
        listener.listen(16)
        selector.register(listener, selectors.EVENT_READ)
    ready.write_text("ok")
    while True:
        for selected, _ in selector.select():
            conn, _ = selected.fileobj.accept()  # type: ignore[union-attr]
            threading.Thread(target=handshake, args=(conn,), daemon=True).start()


def endpoint_run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    work = work / "endpoints"
    work.mkdir()
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / name)], check=True)
    host_pub = " ".join((work / "host_key.pub").read_text().split()[:2])
    n = args.endpoints
    (work / "known_hosts").write_text(
        "".join(f"[{endpoint_address(i)}]:{ENDPOINT_PORT} {host_pub}\n" for i in range(n))
    )
    (work / "ssh_config").write_text(
        f"Host 127.45.*\n    Port {ENDPOINT_PORT}\n    User root\n    IdentityFile {work / 'client_key'}\n"
        f"    IdentitiesOnly yes\n    UserKnownHostsFile {work / 'known_hosts'}\n    GlobalKnownHostsFile /dev/null\n"
        "    StrictHostKeyChecking yes\n    BatchMode yes\n"
    )
    ready = work / "ready"
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve-endpoints", str(n), "--serve-dir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    rounds = Rounds(work / "notify")
    proc: subprocess.Popen[str] | None = None
    try:
        end = time.monotonic() + 60
        while not ready.exists():
            if server.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"the endpoints' server did not start: {server.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            time.sleep(0.05)
        interval = args.endpoint_interval
        started = time.time()
        targets = [endpoint_address(i) for i in range(n)]
        proc = start_watcher(targets, work / "ssh_config", work, interval, rounds, args.endpoint_mode)
        rounds.wait(1, 900, proc)
        first_round_s = rounds.times[0] - started
        rounds.wait(2, 120 + 2 * interval, proc)
        cost = idle_cost(proc.pid, max(args.idle_window, 4 * interval))
        gaps = [b - a for a, b in zip(rounds.times[1:], rounds.times[2:], strict=False)]  # past the connecting round
        cost["mean_round_gap_s"] = statistics.mean(gaps) if gaps else float("nan")
        audit = work / "watch-state" / "watch-audit.jsonl"
        unreachable = audit.read_text().count('"unreachable"') if audit.exists() else 0
        cost.update(endpoints=n, mode=args.endpoint_mode, interval_s=interval, first_round_s=first_round_s,
                    unreachable_events=unreachable,
                    rss_kib_per_connection=cost["rss_mib"] * 1024 / n, server_alive=server.poll() is None)  # fmt: skip
        stop_watcher(proc)
        cost["held_only"] = held_only(n, work, max(args.idle_window, 4 * interval))
        print(json.dumps({"endpoints": {k: round(v, 4) if isinstance(v, float) else v for k, v in cost.items()}}),
              flush=True)  # fmt: skip
        return cost
    finally:
        if proc is not None:
            stop_watcher(proc)
        rounds.close()
        os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def hold_endpoints(n: int, work: Path) -> None:
    """(Run as its own process.) The floor of the watcher's idle cost: the same n connections, held through
    remediate's SSHTransport, one command each, then never used again."""
    from remediate.transport.base import SSHOptions
    from remediate.transport.ssh import SSHTransport

    held = []
    for i in range(n):
        transport = SSHTransport(endpoint_address(i), SSHOptions(ssh_config=str(work / "ssh_config")))
        transport.run("true", timeout=15)
        held.append(transport)
    (work / "held").write_text("ok")
    threading.Event().wait()


def held_only(n: int, work: Path, window: float) -> dict[str, float]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--hold-endpoints", str(n), "--serve-dir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        end = time.monotonic() + 900
        while not (work / "held").exists():
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"holding {n} connections failed: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            time.sleep(0.05)
        time.sleep(1)
        return idle_cost(proc.pid, window)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


# -- the table ----------------------------------------------------------------------------------------------
def report(idle: list[dict[str, Any]], detections: list[dict[str, Any]], endpoints: dict[str, Any] | None) -> list[str]:
    head = ("mode", "hosts", "interval s", "CPU core", "RSS MiB", "PSS MiB", "threads", "sockets", "detect med s",
            "detect max s", "decide max s", "≤2 s")  # fmt: skip
    widths = (6, 5, 10, 8, 7, 7, 7, 7, 12, 12, 12, 4)
    lines = [" ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True))]
    for cost in idle:
        rows = [d for d in detections if (d["mode"], d["interval_s"]) == (cost["mode"], cost["interval_s"])]
        med = statistics.median(d["detected_s"] for d in rows) if rows else float("nan")
        top = max((d["detected_s"] for d in rows), default=float("nan"))
        decide = max((d["decided_s"] for d in rows), default=float("nan"))
        meets = "yes" if rows and decide <= GOAL_DETECT_S else "no"
        cells = (cost["mode"], cost["hosts"], f"{cost['interval_s']:g}", f"{cost['cpu_core']:.4f}",
                 f"{cost['rss_mib']:.1f}", f"{cost['pss_mib']:.1f}", cost["threads"], cost["sockets"], f"{med:.2f}",
                 f"{top:.2f}", f"{decide:.2f}", meets)  # fmt: skip
        lines.append(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    if endpoints is not None:
        e = endpoints
        lines.append(
            f"{e['mode']:>6} {e['endpoints']:>5} {e['interval_s']:>10g} {e['cpu_core']:>8.4f} {e['rss_mib']:>7.1f} "
            f"{e['pss_mib']:>7.1f} {e['threads']:>7} {e['sockets']:>7} {'-':>12} {'-':>12} {'-':>12} {'-':>4}"
        )
        lines.append(f"endpoints: first round (connect all) {e['first_round_s']:.1f} s, "
                     f"{e['rss_kib_per_connection']:.0f} KiB RSS per connection, unreachable events "
                     f"{e['unreachable_events']}; the same connections held, never polled: "
                     f"{e['held_only']['cpu_core']:.4f} core, {e['held_only']['rss_mib']:.0f} MiB; "
                     f"goals ≤ {GOAL_CPU} core: {'met' if e['cpu_core'] <= GOAL_CPU else 'NOT met'}, "
                     f"≤ {GOAL_MEM_MIB:.0f} MiB: {'met' if e['rss_mib'] <= GOAL_MEM_MIB else 'NOT met'}")  # fmt: skip
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20, help="0: skip parts 1 and 2")
    parser.add_argument("--intervals", default="1,5,15", help="comma-separated --interval values, seconds")
    parser.add_argument("--reps", type=int, default=3, help="crashes per interval, a different host each")
    parser.add_argument("--idle-window", type=float, default=30.0, help="seconds (at least 3 intervals)")
    parser.add_argument("--endpoints", type=int, default=500, help="0: skip part 3")
    parser.add_argument("--endpoint-interval", type=float, default=15.0)
    parser.add_argument("--modes", default="follow,poll", help="follow (the default watcher), poll (--no-follow)")
    parser.add_argument("--endpoint-mode", default="follow", choices=("follow", "poll"))
    parser.add_argument("--seed", type=int, default=22, help="of the random wait before each crash")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--serve-endpoints", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--hold-endpoints", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_endpoints:
        d = args.serve_dir
        serve_endpoints(args.serve_endpoints, d / "host_key", d / "client_key.pub", d / "ready")
        return 0
    if args.hold_endpoints:
        hold_endpoints(args.hold_endpoints, args.serve_dir)
        return 0
    from sandbox import Sandbox

    reason = Sandbox.unavailable_reason()
    if reason:
        print(f"cannot run sandbox hosts: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="watch-cost-") as tmp:
        work = Path(tmp)
        idle, detections = sandbox_runs(args, work) if args.hosts else ([], [])
        endpoints = endpoint_run(args, work) if args.endpoints else None
    lines = report(idle, detections, endpoints)
    print("\n" + "\n".join(lines))
    out = args.json_out or REPO / "bench" / "results" / f"watch-cost-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"argv": sys.argv[1:], "goal_detect_s": GOAL_DETECT_S, "idle": idle, "detections": detections,
           "endpoints": endpoints, "table": lines}  # fmt: skip
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nraw samples: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
