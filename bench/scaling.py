"""Throughput of `oom` over a sandbox fleet: our own rollout vs ansible-playbook with the remediate.serving
collection (docs/internals/SCALING.md), and what each costs the controller per fork.

For each ``--forks`` value and each contender, on freshly reset hosts running the incident's unit (the stand-in
loads in ~0.1 s, so what remains is each tool's own cost plus the restart), with the library installed on every
host from wheels (outside the timing):

- ``remediate``: ``remediate oom HOST… --canary 0 --forks F --json`` from this controller over SSH;
- ``ansible``: ``ansible-playbook --forks F`` of one play running ``remediate.serving.oom`` on every host (the
  collection built and installed from its tarball; Ansible's ssh connection, pipelining on, host keys checked).

Both run the same transaction (lock, backup, write, daemon-reload, reset-failed, restart, health wait); no
canary or batches, so ``forks`` alone bounds the concurrency. Reported per run: wall time, hosts per minute,
controller CPU seconds (the children's rusage) and per host, and the peak resident memory of the controller's
process tree (Ansible's forks and their ssh processes included; sampled every 0.1 s) and per fork.

    .venv/bin/python bench/scaling.py [--hosts 20] [--forks 5,20] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # sandbox/ and tests/support/ (the drivers the tests use)

from sandbox import Sandbox, SandboxHost  # noqa: E402
from sandbox.host import free_address_block  # noqa: E402
from sandbox.units import free_port, incident_unit, wait_http_ok  # noqa: E402
from tests.support.wheelhouse import VENV, build, install  # noqa: E402

BIN = Path(sys.executable).parent
TIME_SCALE = 0.0002
PLAY = [
    {
        "name": "oom on every host",
        "hosts": "gpu",
        "gather_facts": False,
        "become": True,
        "tasks": [{"name": "oom", "remediate.serving.oom": {"wait_timeout": 120}}],
    }
]


def prepare(hosts: list[SandboxHost], wheels: Path) -> None:
    def one(host: SandboxHost) -> None:
        host.reset()
        host.set_standin(time_scale=TIME_SCALE)
        port = free_port(host.address)
        host.install_unit("sglang.service", incident_unit(host.address, port))
        install(host, wheels)
        if not wait_http_ok(host.address, port):
            raise SystemExit(f"{host.name}: the incident server did not get healthy")

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(one, hosts))


def _tree_rss_kib(root: int) -> int:
    """Resident memory of ``root`` and its descendants (/proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        rss[int(entry)] = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(rss.get(pid, 0) for pid in tree)


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, float]]:
    """Run ``argv``; its wall time, children's CPU seconds and peak tree RSS."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate(timeout=900)
    wall = time.monotonic() - start
    done.set()
    sampler.join()
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": peak[0] / 1024,
    }


def run_remediate(fleet: Sandbox, hosts: list[SandboxHost], forks: int, work: Path) -> dict[str, float]:
    argv = [sys.executable, "-m", "remediate", "oom", *(h.name for h in hosts), "--ssh-config", str(fleet.ssh_config)]
    argv += ["--canary", "0", "--forks", str(forks), "--json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env["REMEDIATE_STATE_DIR"] = str(work / "state")
    proc, sample = timed(argv, env, work)
    outcomes = {r["outcome"] for r in json.loads(proc.stdout or '{"results": []}')["results"]}
    if proc.returncode != 0 or outcomes != {"remediated"}:
        raise SystemExit(f"remediate failed (exit {proc.returncode}): {outcomes}\n{proc.stderr[-2000:]}")
    return sample


def run_ansible(
    fleet: Sandbox, hosts: list[SandboxHost], forks: int, work: Path, collections: Path
) -> dict[str, float]:
    variables = {
        "ansible_python_interpreter": f"{VENV}/bin/python",
        "ansible_ssh_common_args": f"-F {fleet.ssh_config}",
    }
    inventory = {"gpu": {"hosts": {h.name: {} for h in hosts}, "vars": variables}}
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (work / "play.yml").write_text(yaml.safe_dump(PLAY, sort_keys=False))
    (work / "ansible.cfg").write_text("[defaults]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(work / "ansible.cfg"), ANSIBLE_HOME=str(work / "ansible-home"),
               ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_HOST_KEY_CHECKING="True",
               ANSIBLE_SSH_ARGS="-o ControlMaster=no", ANSIBLE_PIPELINING="True", ANSIBLE_NOCOLOR="1")  # fmt: skip
    argv = [str(BIN / "ansible-playbook"), "-i", "inventory.yml", "play.yml", "--forks", str(forks)]
    proc, sample = timed(argv, env, work)
    if proc.returncode != 0 or proc.stdout.count("changed: [") != len(hosts):
        raise SystemExit(
            f"ansible-playbook failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-1000:]}"
        )
    return sample


def collection(work: Path) -> Path:
    out = work / "collection"
    subprocess.run([BIN / "ansible-galaxy", "collection", "build", str(REPO / "ansible"), "--output-path", str(out)],
                   check=True, capture_output=True)  # fmt: skip
    (tarball,) = out.glob("*.tar.gz")
    path = work / "collections"
    subprocess.run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", str(path), str(tarball)],
                   check=True, capture_output=True)  # fmt: skip
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--forks", default="5,20")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    reason = Sandbox.unavailable_reason()
    if reason:
        print(f"cannot run sandbox hosts: {reason}", file=sys.stderr)
        return 2
    samples: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        work = Path(tmp)
        wheels = build(work / "wheels")
        collections = collection(work)
        fleet = Sandbox(work / "sandbox", args.hosts, first_address=free_address_block(args.hosts, 47))
        fleet.start()
        try:
            for forks in [int(f) for f in args.forks.split(",")]:
                for run in range(args.runs):
                    for contender in ("remediate", "ansible")[:: 1 if run % 2 == 0 else -1]:
                        prepare(fleet.hosts, wheels)
                        if contender == "remediate":
                            sample = run_remediate(fleet, fleet.hosts, forks, work)
                        else:
                            sample = run_ansible(fleet, fleet.hosts, forks, work, collections)
                        row = {"contender": contender, "forks": forks, "hosts": args.hosts, **sample}
                        row["hosts_per_min"] = args.hosts / sample["wall_s"] * 60
                        row["cpu_s_per_host"] = sample["cpu_s"] / args.hosts
                        row["rss_mib_per_fork"] = sample["peak_rss_mib"] / forks
                        samples.append(row)
                        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}),
                              flush=True)  # fmt: skip
        finally:
            fleet.stop()
    print(f"\n{'contender':<10} {'forks':>5} {'wall s':>7} {'hosts/min':>9} {'CPU s':>6} {'CPU s/host':>10} "
          f"{'peak MiB':>8} {'MiB/fork':>8}")  # fmt: skip
    for r in samples:
        print(f"{r['contender']:<10} {r['forks']:>5} {r['wall_s']:>7.1f} {r['hosts_per_min']:>9.0f} {r['cpu_s']:>6.1f} "
              f"{r['cpu_s_per_host']:>10.2f} {r['peak_rss_mib']:>8.0f} {r['rss_mib_per_fork']:>8.1f}")  # fmt: skip
    out = args.json_out or REPO / "bench" / "results" / f"scaling-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"samples": samples}, indent=2) + "\n")
    print(f"\nraw samples: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
