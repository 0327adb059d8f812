"""`remediate oom` side by side with an equivalent Ansible playbook and the floor, on sandbox hosts.

For each fleet size (``--hosts 1,10,20``) and each run, the three contenders go in rotating order, each
on freshly reset hosts running the incident's unit (the stand-in loads almost instantly, so what remains
is each tool's own cost plus the restart itself):

- ``remediate``: ``remediate oom HOST… --forks F --json``;
- ``ansible``: ansible-core (from PyPI, in ``bench/.venv-ansible``), pipelining on, host keys verified:
  three ``replace`` tasks, ``systemd_service`` (daemon_reload + restarted), ``command: systemctl
  reset-failed``, ``uri`` until ``/health`` answers 200 — ``forks`` F, ``strategy: free``;
- ``floor``: one plain ``ssh`` per host (all at once) running daemon-reload + reset-failed + restart, then
  polling ``/health`` from the controller.

Per contender it reports the median wall time, the ratio to the floor, the overhead (wall − floor),
SSH connections and command sessions per host (counted from the hosts' own sshd logs at LogLevel
VERBOSE, in their journals: ``Accepted publickey`` and ``Starting session``), systemctl invocations per host (the hosts'
audit logs) and controller CPU seconds (children's rusage). ``--json-out`` (default under
``bench/results/``) keeps the raw samples so runs can be compared.

    .venv/bin/python bench/vs_ansible.py [--hosts 1,10,20] [--runs 3] [--forks 20] [--baseline-src DIR]

``--baseline-src DIR`` adds remediate from another source tree (e.g. a checkout of main's ``src``) as a
fourth contender, so a change is measured paired with what it replaces.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sandbox import Sandbox, SandboxHost  # noqa: E402
from sandbox import image as sandbox_image  # noqa: E402
from sandbox.host import free_address_block  # noqa: E402
from sandbox.units import free_port, incident_unit, wait_http_ok  # noqa: E402

ANSIBLE_VENV = REPO / "bench" / ".venv-ansible"
ANSIBLE_SPEC = "ansible-core>=2.19,<2.22"
CONTENDERS = ("remediate", "ansible", "floor")
UNIT = "/etc/systemd/system/sglang.service"
TIME_SCALE = 0.0002  # stand-in load 450 s x 0.0002 = 0.09 s: what remains is the tools' own cost

PLAYBOOK = """\
- hosts: targets
  gather_facts: false
  strategy: free
  tasks:
    - name: lower the fraction
      ansible.builtin.replace:
        path: {unit}
        regexp: '--mem-fraction-static 0\\.94'
        replace: '--mem-fraction-static 0.93'
    - name: chunk the prefill
      ansible.builtin.replace:
        path: {unit}
        regexp: '--trust-remote-code$'
        replace: '--trust-remote-code --chunked-prefill-size 4096'
    - name: expandable segments
      ansible.builtin.replace:
        path: {unit}
        regexp: '^(Environment=CUDA_HOME=.*)$'
        replace: '\\1\\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True'
    - name: forget the failure
      ansible.builtin.command: systemctl reset-failed sglang.service
      changed_when: false
      failed_when: false
    - name: reload and restart
      ansible.builtin.systemd_service:
        name: sglang.service
        daemon_reload: true
        state: restarted
    - name: wait until healthy
      ansible.builtin.uri:
        url: "http://{{{{ health_address }}}}:{{{{ health_port }}}}/health"
      register: health
      until: health.status == 200
      retries: 600
      delay: 0.2
"""


# `--profile`: remediate runs under this wrapper (`python -c TRACE ARGS…`, the same interpreter start as `-m
# remediate`). A post-import hook (PEP 451: the finder's spec, its loader's exec_module) stamps the fan-out's
# seams with time.monotonic() (CLOCK_MONOTONIC: one clock for the bench and the child): ConnectAhead.start,
# Rollout.run and each host's job (fleet/jobs.py ``connected``). Nothing is imported ahead of the CLI, so the
# import order is the real one. The marks go to $BENCH_TRACE at exit (atexit: after the report is printed).
TRACE = r"""
import atexit, importlib.abc, importlib.machinery, json, os, sys, time
marks = {"py": time.monotonic()}
jobs = []
def timed(fn, before, after):
    def run(*args, **kw):
        marks.setdefault(before, time.monotonic())
        try:
            return fn(*args, **kw)
        finally:
            marks[after] = time.monotonic()
    return run
def patch(module):
    if module.__name__ == "remediate.fleet.rollout":
        module.Rollout.run = timed(module.Rollout.run, "roll_start", "roll_end")
        return
    module.ConnectAhead.start = timed(module.ConnectAhead.start, "ahead_start", "ahead_end")
    connected = module.connected
    def traced(job, ssh, factory):
        work = connected(job, ssh, factory)
        def run(entry):
            start = time.monotonic()
            try:
                return work(entry)
            finally:
                jobs.append([entry.name, start, time.monotonic()])
        return run
    module.connected = traced
class Seams(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ("remediate.fleet.jobs", "remediate.fleet.rollout"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run_module = spec.loader.exec_module
        def exec_module(module):
            run_module(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Seams())
def dump():
    marks["exit"] = time.monotonic()
    with open(os.environ["BENCH_TRACE"], "w") as out:
        json.dump({"marks": marks, "jobs": jobs}, out)
atexit.register(dump)
from remediate.cli import main
marks["cli"] = time.monotonic()
main()
"""
PROFILE = (
    ("interpreter", "exec → the interpreter runs our first line"),
    ("cli_import", "remediate.cli (click)"),
    ("command", "click's parsing → the command's api call: the api, fleet, validation imports; every host's options"),
    ("connect_setup", "ConnectAhead.start: TCP connections, paramiko's import, transports, handshakes begun"),
    ("job_import", "the job factory: the transaction's modules (the handshakes run meanwhile)"),
    ("phases", "the host's own phases (mean over hosts; their sum)"),
    ("in_job", "inside a host's job, outside its phases (mean): e.g. the calibration record"),
    ("scheduling", "thread scheduling: jobs' start after Rollout.run (mean) + the slowest host past the mean"),
    ("collection", "the last job's end → Rollout.run returns (result collection, the retry file's checks)"),
    ("render", "Rollout.run's end → atexit: the transaction record, the report or JSON, exit"),
    ("teardown", "atexit → the bench sees the process end"),
)


def profile_of(trace: dict, results: list[dict], exec_at: float, end_at: float) -> dict[str, float]:
    """The wall time from exec to exit, cut at the traced seams (``prof_*``): the cuts sum to the wall time."""
    m, jobs = trace["marks"], trace["jobs"]
    if not jobs:
        return {}
    roll = m["roll_start"]
    ahead_start, ahead_end = m.get("ahead_start", roll), m.get("ahead_end", roll)  # a tree without ConnectAhead
    starts, ends = [j[1] for j in jobs], [j[2] for j in jobs]
    mean_start, mean_job = statistics.mean(starts), statistics.mean(e - s for s, e in zip(starts, ends, strict=True))
    phases = statistics.mean(sum(p["seconds"] for p in r["phases"]) for r in results) if results else 0.0
    cuts = {
        "interpreter": m["py"] - exec_at,
        "cli_import": m["cli"] - m["py"],
        "command": ahead_start - m["cli"],
        "connect_setup": ahead_end - ahead_start,
        "job_import": roll - ahead_end,
        "phases": phases,
        "in_job": mean_job - phases,
        "scheduling": (mean_start - roll) + (max(ends) - mean_start - mean_job),
        "collection": m["roll_end"] - max(ends),
        "render": m["exit"] - m["roll_end"],
        "teardown": end_at - m["exit"],
    }
    return {f"prof_{k}": v for k, v in cuts.items()}


def ansible_playbook_bin() -> Path:
    """ansible-playbook from the bench's own venv (created on first use)."""
    exe = ANSIBLE_VENV / "bin" / "ansible-playbook"
    if not exe.exists():
        print(f"installing {ANSIBLE_SPEC} into {ANSIBLE_VENV} …", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True)
        subprocess.run([str(ANSIBLE_VENV / "bin" / "pip"), "install", "-q", ANSIBLE_SPEC], check=True)
    return exe


def prepare(hosts: list[SandboxHost]) -> dict[str, int]:
    """Reset each host and start the incident's server on a port of its own; wait until all are healthy."""

    def one(host: SandboxHost) -> tuple[str, int]:
        host.reset()
        host.set_standin(time_scale=TIME_SCALE)
        port = free_port(host.address)
        host.install_unit("sglang.service", incident_unit(host.address, port))
        if not wait_http_ok(host.address, port):
            raise SystemExit(f"{host.name}: the incident server did not get healthy on {host.address}:{port}")
        return host.name, port

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(pool.map(one, hosts))


def sshd_counts(host: SandboxHost) -> tuple[int, int]:
    """(connections, command sessions) in the host's sshd log so far: its journal (sshd runs under the
    host's own systemd and logs there; OpenSSH >= 9.8 logs sessions as sshd-session)."""
    out = host.run("journalctl", "--no-pager", "-q", "-o", "cat", "-t", "sshd", "-t", "sshd-session").stdout
    return len(re.findall(r"Accepted publickey", out)), len(re.findall(r"Starting session: command", out))


def remediate_cli(
    command: list[str], fleet: Sandbox, hosts: list[SandboxHost], forks: int, work: Path, *, baseline: bool
) -> tuple[subprocess.CompletedProcess[str], list[dict], dict[str, float]]:
    """``remediate COMMAND HOST… --ssh-config … --forks F --json``, under the trace with ``--profile``: the
    process, its results, and (``--profile``) its wall time cut at the seams."""
    trace = work / "trace.json"
    trace.unlink(missing_ok=True)
    head = [sys.executable, "-c", TRACE] if PROFILE_ON else [sys.executable, "-m", "remediate"]
    argv = [*head, *command, *(h.name for h in hosts), "--ssh-config", str(fleet.ssh_config)]
    # main before issue 26 had no --forks on the read-only commands: they ran 10 hosts at a time
    argv += ["--json"] if baseline and command[0] != "oom" else ["--forks", str(forks), "--json"]
    env = dict(os.environ, BENCH_TRACE=str(trace), **({"PYTHONPATH": str(BASELINE_SRC)} if baseline else {}))
    exec_at = time.monotonic()
    proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=600, env=env)
    end_at = time.monotonic()
    results = json.loads(proc.stdout or '{"results": []}')["results"]
    cuts = profile_of(json.loads(trace.read_text()), results, exec_at, end_at) if trace.exists() else {}
    return proc, results, cuts


def run_remediate(
    fleet: Sandbox, hosts: list[SandboxHost], ports: dict[str, int], forks: int, work: Path, *, baseline: bool = False
) -> dict[str, float]:
    # No canary batch: the playbook has no `serial` either, so both start every host at once.
    proc, results, cuts = remediate_cli(["oom", "--canary", "0"], fleet, hosts, forks, work, baseline=baseline)
    outcomes = {r["host"]: f"{r['outcome']} {r.get('error') or ''}".strip() for r in results}
    if proc.returncode != 0 or {r["outcome"] for r in results} != {"remediated"}:
        raise SystemExit(f"remediate failed (exit {proc.returncode}): {outcomes}\n{proc.stderr[-2000:]}")
    return {**phase_means(results), **cuts}


def phase_means(results: list[dict]) -> dict[str, float]:
    """The tool's own phases (`--json`), averaged over the hosts: where remediate's wall time goes."""
    phases: dict[str, float] = {}
    for result in results:
        for phase in result["phases"]:
            key = f"phase_{phase['name']}_s"
            phases[key] = phases.get(key, 0.0) + phase["seconds"] / len(results)
    return phases


def ansible(
    tool: str, args: list[str], fleet: Sandbox, hosts: list[SandboxHost], ports: dict[str, int], forks: int, work: Path
) -> None:
    """``ansible-playbook`` or ``ansible`` (ad-hoc) over the hosts: pipelining on, host keys verified, forks F."""
    inventory = work / "ansible-hosts.yaml"
    inventory.write_text(
        json.dumps(
            {
                "targets": {
                    "hosts": {h.name: {"health_address": h.address, "health_port": ports[h.name]} for h in hosts},
                    "vars": {
                        "ansible_user": "root",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        "ansible_ssh_common_args": f"-F {fleet.ssh_config}",
                    },
                }
            }
        )
    )
    env = dict(
        os.environ,
        ANSIBLE_PIPELINING="true",
        ANSIBLE_HOST_KEY_CHECKING="true",
        ANSIBLE_FORKS=str(forks),
        ANSIBLE_RETRY_FILES_ENABLED="false",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCAL_TEMP=str(work / ".ansible-tmp"),
        ANSIBLE_HOME=str(work / ".ansible"),
    )
    exe = ansible_playbook_bin().with_name(tool)
    proc = subprocess.run(
        [str(exe), "-i", str(inventory), *args], cwd=work, capture_output=True, text=True, env=env, timeout=600
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tool} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")


def run_ansible(
    fleet: Sandbox, hosts: list[SandboxHost], ports: dict[str, int], forks: int, work: Path
) -> dict[str, float]:
    playbook = work / "oom.yaml"
    playbook.write_text(PLAYBOOK.format(unit=UNIT))
    ansible("ansible-playbook", [str(playbook)], fleet, hosts, ports, forks, work)
    return {}


# The read-only commands and their ad-hoc equivalents: what `status` reads (the unit's properties; remediate
# also reads the unit's files and /server_info), and what `diagnose` reads besides (the journal, nvidia-smi).
SHOW = "systemctl show sglang.service -p ActiveState,SubState,NRestarts,MainPID,ExecStart,FragmentPath,NeedDaemonReload"
READS = {
    "status": ("command", SHOW),
    "diagnose": (
        "shell",
        f"{SHOW}; journalctl -u sglang.service -o short-iso --no-pager -q -n 2000;"
        " nvidia-smi --query-gpu=index,memory.total,memory.used --format=csv,noheader,nounits;"
        " nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits",
    ),
}


def read_runner(command: str, contender: str):  # type: ignore[no-untyped-def]
    """``remediate COMMAND`` (this tree or the baseline), ``ansible targets -m MODULE -a …``, or one plain
    ``ssh`` per host (all at once) running the same command: the read floor."""
    module, line = READS[command]

    def run(fleet: Sandbox, hosts: list[SandboxHost], ports: dict[str, int], forks: int, work: Path) -> dict:
        if contender in ("remediate", "baseline"):
            proc, results, cuts = remediate_cli([command], fleet, hosts, forks, work, baseline=contender == "baseline")
            if proc.returncode != 0 or len(results) != len(hosts):
                raise SystemExit(f"remediate {command} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            return {**phase_means(results), **cuts}
        if contender == "ansible":
            ansible("ansible", ["targets", "-m", module, "-a", line], fleet, hosts, ports, forks, work)
            return {}

        def one(host: SandboxHost) -> None:
            subprocess.run(["ssh", "-F", str(fleet.ssh_config), host.name, line], check=True, timeout=120,
                           capture_output=True)  # fmt: skip

        with ThreadPoolExecutor(max_workers=max(1, min(forks, len(hosts)))) as pool:
            list(pool.map(one, hosts))
        return {}

    return run


def run_floor(
    fleet: Sandbox, hosts: list[SandboxHost], ports: dict[str, int], forks: int, work: Path
) -> dict[str, float]:
    script = "systemctl daemon-reload && systemctl reset-failed sglang.service; systemctl restart sglang.service"

    def one(host: SandboxHost) -> None:
        subprocess.run(["ssh", "-F", str(fleet.ssh_config), host.name, script], check=True, timeout=120)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://{host.address}:{ports[host.name]}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise SystemExit(f"floor: {host.name} never healthy")

    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(hosts)))) as pool:
        list(pool.map(one, hosts))
    return {}


def run_baseline(
    fleet: Sandbox, hosts: list[SandboxHost], ports: dict[str, int], forks: int, work: Path
) -> dict[str, float]:
    """remediate from another source tree (``--baseline-src``), e.g. main's, paired with this one."""
    return run_remediate(fleet, hosts, ports, forks, work, baseline=True)


PROFILE_ON = False
RUNNERS = {"remediate": run_remediate, "ansible": run_ansible, "floor": run_floor, "baseline": run_baseline}
BASELINE_SRC: Path | None = None


def measure(
    contender: str,
    fleet: Sandbox,
    hosts: list[SandboxHost],
    forks: int,
    work: Path,
    *,
    read: str | None = None,
    ports: dict[str, int] | None = None,
) -> dict[str, float]:
    """One contender's run: of `oom` on freshly reset hosts, or (``read``) of a read-only command on the
    hosts as they are (``ports``: prepared once for all the reads)."""
    ports = prepare(hosts) if ports is None else ports
    fleet.wait_idle()
    before = {h.name: (sshd_counts(h), len(h.audit())) for h in hosts}
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    runner = read_runner(read, contender) if read else RUNNERS[contender]
    extra = runner(fleet, hosts, ports, forks, work)
    wall = time.monotonic() - start
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    conns = sessions = systemctls = 0
    for h in hosts:
        (c0, s0), a0 = before[h.name]
        c1, s1 = sshd_counts(h)
        conns, sessions, systemctls = conns + c1 - c0, sessions + s1 - s0, systemctls + len(h.audit()) - a0
    n = len(hosts)
    return {
        "wall_s": wall,
        "cpu_s": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
        "ssh_connections_per_host": conns / n,
        "sessions_per_host": sessions / n,
        "systemctl_per_host": systemctls / n,
        **extra,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,10,20", help="fleet sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--forks", type=int, default=20)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument(
        "--baseline-src", type=Path, help="also run remediate from this src/ directory (contender 'baseline')"
    )
    parser.add_argument("--reads", default="status,diagnose", help="read-only commands to bench too ('' for none)")
    parser.add_argument("--profile", action="store_true", help="cut remediate's wall time at its seams (TRACE)")
    args = parser.parse_args()
    global PROFILE_ON
    PROFILE_ON = args.profile
    # As installed from a wheel (pip compiles bytecode), not as an editable tree that compiles every start.
    compileall.compile_dir(REPO / "src", quiet=1)
    global BASELINE_SRC
    if args.baseline_src:
        BASELINE_SRC = args.baseline_src.resolve()
        compileall.compile_dir(BASELINE_SRC, quiet=1)
    sizes = [int(s) for s in args.hosts.split(",") if s.strip()]
    contenders = [c for c in args.contenders.split(",") if c] + (["baseline"] if args.baseline_src else [])
    reason = Sandbox.unavailable_reason()
    if reason:
        print(f"cannot run sandbox hosts: {reason}", file=sys.stderr)
        return 2
    if "ansible" in contenders:
        ansible_playbook_bin()
    # Count connections and sessions from the hosts' own sshd logs.
    sandbox_image.SSHD_CONFIG = sandbox_image.SSHD_CONFIG.replace("LogLevel ERROR", "LogLevel VERBOSE")
    samples: dict[str, dict[str, list[dict[str, float]]]] = {}
    reads = [r for r in args.reads.split(",") if r]
    read_samples: dict[str, dict[str, dict[str, list[dict[str, float]]]]] = {r: {} for r in reads}
    with tempfile.TemporaryDirectory(prefix="vs-ansible-") as tmp:
        work = Path(tmp)
        fleet = Sandbox(work / "sandbox", max(sizes), first_address=free_address_block(max(sizes), 46))
        fleet.start()
        try:
            for n in sizes:
                per = samples.setdefault(str(n), {c: [] for c in contenders})
                for run in range(args.runs):
                    order = contenders[run % len(contenders) :] + contenders[: run % len(contenders)]
                    for contender in order:
                        per[contender].append(measure(contender, fleet, fleet.hosts[:n], args.forks, work))
                if reads:  # the read-only commands, on the hosts as they are: prepared once
                    ports = prepare(fleet.hosts[:n])
                    for run in range(args.runs):
                        order = contenders[run % len(contenders) :] + contenders[: run % len(contenders)]
                        for read in reads:
                            got = read_samples[read].setdefault(str(n), {c: [] for c in contenders})
                            for contender in order:
                                sample = measure(contender, fleet, fleet.hosts[:n], args.forks, work, read=read,
                                                 ports=ports)  # fmt: skip
                                got[contender].append(sample)
        finally:
            fleet.stop()
    print_table(samples, args.runs, args.forks)
    for read, per_size in read_samples.items():
        print()
        print_table(per_size, args.runs, args.forks, title=f"remediate {read} vs `ansible -m {READS[read][0]}` vs ssh")
        print_scaling(per_size, read)
    if args.profile:
        print_profile("oom", samples)
        for read, per_size in read_samples.items():
            print_profile(read, per_size)
    out = args.json_out or REPO / "bench" / "results" / f"vs_ansible-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"runs": args.runs, "forks": args.forks, "samples": samples, "reads": read_samples}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nraw samples: {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return 0


def medians(per: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each contender's medians, key by key, over its runs."""
    return {c: {k: statistics.median(s.get(k, 0.0) for s in v) for k in v[0]} for c, v in per.items() if v}


def print_table(
    samples: dict[str, dict[str, list[dict[str, float]]]],
    runs: int,
    forks: int,
    title: str = "remediate oom vs Ansible vs the floor",
) -> None:
    print(f"{title}: medians of {runs} runs, forks {forks}, stand-in load ~0.09 s")
    head = f"{'hosts':>5} {'contender':<10}{'wall s':>8}{'x floor':>9}{'overhead s':>11}"
    head += f"{'ssh conn/h':>11}{'sessions/h':>11}{'systemctl/h':>12}{'ctl CPU s':>10}"
    print(head)
    for n, per in samples.items():
        med = medians(per)
        floor = med.get("floor", {}).get("wall_s")
        for contender, m in med.items():
            ratio = f"{m['wall_s'] / floor:.2f}" if floor else "-"
            over = f"{m['wall_s'] - floor:.3f}" if floor else "-"
            row = f"{n:>5} {contender:<10}{m['wall_s']:>8.3f}{ratio:>9}{over:>11}"
            row += f"{m['ssh_connections_per_host']:>11.1f}{m['sessions_per_host']:>11.1f}"
            row += f"{m['systemctl_per_host']:>12.1f}{m['cpu_s']:>10.2f}"
            print(row + f"   ctl CPU/host {m['cpu_s'] / int(n):.3f} s")
        if floor and "remediate" in med and "ansible" in med:
            r, a = med["remediate"]["wall_s"], med["ansible"]["wall_s"]
            over_r, over_a = r - floor, a - floor
            ratio = f"{over_a / over_r:.1f}x" if over_r > 0 else "n/a"
            print(f"{'':>5} remediate is {a / r:.1f}x faster than Ansible in wall time, {ratio} in overhead")
        for contender in ("remediate", "baseline"):
            if contender in med:
                print(f"{'':>5} {phase_line(med[contender], contender)}")


def print_scaling(per_size: dict[str, dict[str, list[dict[str, float]]]], read: str) -> None:
    """The read-only fan-out's goal: N hosts against one, in wall time (medians)."""
    if "1" not in per_size:
        return
    for contender in per_size["1"]:
        one = medians(per_size["1"])[contender]["wall_s"]
        ratios = [
            f"{n} hosts {medians(per)[contender]['wall_s'] / one:.2f}x" for n, per in per_size.items() if n != "1"
        ]
        if ratios:
            print(f"{'':>5} {read} {contender}: the wall time of one host × " + ", ".join(ratios))


def print_profile(command: str, per_size: dict[str, dict[str, list[dict[str, float]]]]) -> None:
    """remediate's wall time cut at its seams (``--profile``), medians per cut; the cuts of one run sum to
    its wall time, their medians nearly."""
    for contender in ("remediate", "baseline"):
        rows = {n: medians(per)[contender] for n, per in per_size.items() if per.get(contender)}
        rows = {n: m for n, m in rows.items() if "prof_interpreter" in m}
        if not rows:
            continue
        print(f"\n{command} {contender}: the wall time cut at its seams (s, medians)")
        print(f"{'cut':<14}" + "".join(f"{n + ' hosts':>11}" for n in rows) + "  what runs")
        for name, what in PROFILE:
            print(f"{name:<14}" + "".join(f"{m.get('prof_' + name, 0.0):>11.3f}" for m in rows.values()) + f"  {what}")
        print(
            f"{'sum of cuts':<14}"
            + "".join(f"{sum(m.get('prof_' + c, 0.0) for c, _ in PROFILE):>11.3f}" for m in rows.values())
        )
        print(f"{'wall':<14}" + "".join(f"{m['wall_s']:>11.3f}" for m in rows.values()))


def phase_line(m: dict[str, float], contender: str = "remediate") -> str:
    """remediate's own phases (medians, s); what the phases do not cover is start-up, imports and output."""
    phases = {k[len("phase_") : -len("_s")]: v for k, v in m.items() if k.startswith("phase_")}
    if not phases:
        return f"{contender} phases: -"
    outside = m["wall_s"] - sum(phases.values())
    listed = " ".join(f"{k} {v:.3f}" for k, v in phases.items())
    return f"{contender} phases s: {listed} | outside {outside:.3f}"


if __name__ == "__main__":
    sys.exit(main())
