"""The Ansible path end to end: the watcher, report-only (``--dry-run --webhook``), is the detector; a real
ansible-rulebook (from the package index, in its own cached venv; Java 17 from Debian) runs
ansible/examples/rulebook.yml as shipped; its run_playbook runs the collection's oom on the crashed sandbox
host only. Checked: that host fixed by the module (tokens, backup, the 32k prefill served), a second decision
for it within the throttle's window runs nothing, the other host untouched. Prints the time from the crash
line to the fixed server (docs/internals/SCALING.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from sandbox import Sandbox, SandboxHost
from sandbox.units import free_port
from tests.support.ansible_play import Play
from tests.support.fleet import fleet_events as _events
from tests.support.fleet import fleet_fingerprint as _fingerprint
from tests.support.fleet import watch_fleet as _watch
from tests.support.fleet import write_inventory
from tests.support.node import FAST_KNOBS, REPO, UNIT_PATH, Node, poll
from tests.support.watch import crash_32k as _crash
from tests.support.wheelhouse import install

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RULEBOOK_VERSION = "1.3.2"
TOOLS = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "remediate-test-tools"


def rulebook_venv() -> Path:
    """ansible-rulebook in its own venv, made once (atomically) in the user's cache."""
    venv = TOOLS / f"ansible-rulebook-{RULEBOOK_VERSION}"
    if (venv / ".complete").exists():
        return venv
    assert shutil.which("java"), "ansible-rulebook needs a Java 17 runtime: make system-deps installs it"
    partial = venv.with_name(f"{venv.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(partial)], check=True, timeout=120)
    pip = [str(partial / "bin" / "python"), "-m", "pip", "install", "-q", f"ansible-rulebook=={RULEBOOK_VERSION}"]
    subprocess.run(pip, check=True, capture_output=True, timeout=900)
    (partial / ".complete").touch()
    shutil.rmtree(venv, ignore_errors=True)
    partial.rename(venv)  # its scripts name the old path: it is run as `python -m ansible_rulebook`
    return venv


@pytest.fixture
def rulebook(tmp_path: Path, collections: Path, sandbox_fleet: Sandbox,
             fresh_hosts: Callable[[int], list[SandboxHost]], wheels: Path
             ) -> Iterator[tuple[list[Node], Path, str, Path]]:  # fmt: skip
    hosts = fresh_hosts(2)
    nodes = [Node(sandbox_fleet, h, tmp_path, free_port(h.address)) for h in hosts]

    def prepare(node: Node) -> None:
        node.host.set_standin(**FAST_KNOBS)
        node.install_incident()
        install(node.host, wheels)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(prepare, nodes))
    inventory = write_inventory(tmp_path / "inventory.yaml", sandbox_fleet, hosts)
    work = tmp_path / "eda"
    work.mkdir()
    play = Play(sandbox_fleet, hosts, work, collections)
    play.run("--list-hosts")  # writes the Ansible inventory (inventory.yml)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (work / "vars.yml").write_text(yaml.safe_dump({
        "remediate_eda_port": port, "remediate_playbook": str(REPO / "ansible/examples/oom.yml")}))  # fmt: skip
    venv = rulebook_venv()
    env = {**play.env, "PATH": f"{venv / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    argv = [str(venv / "bin" / "python"), "-m", "ansible_rulebook",
            "--rulebook", str(REPO / "ansible/examples/rulebook.yml"), "-i", str(play.inventory),
            "--vars", str(work / "vars.yml"), "-v"]  # fmt: skip
    log = work / "rulebook.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/endpoint"
        poll(lambda: _listening(port) or proc.poll() is not None, deadline=120, what="ansible-rulebook's webhook")
        assert proc.poll() is None, log.read_text()[-4000:]
        yield nodes, inventory, url, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _post(url: str, body: dict[str, object]) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def _runs(log: Path) -> int:
    return log.read_text().count("PLAY RECAP")


def test_a_decision_of_the_report_only_watcher_is_fixed_by_the_rulebook_once(rulebook, tmp_path: Path) -> None:
    (crashed, other), inventory, url, log = rulebook
    assert _watch(tmp_path, inventory, "all", "--dry-run").returncode == 0  # the watcher's first look
    other_before = _fingerprint(other)
    original = crashed.bytes(UNIT_PATH)

    _crash(crashed)
    crash_seen = time.monotonic()  # the journal has torch's OOM line
    run = _watch(tmp_path, inventory, "all", "--dry-run", "--webhook", url)
    assert run.returncode == 0, run
    (decided,) = [e for e in _events(tmp_path) if e["event"] == "decided"]
    assert (decided["host"], decided["verdict"], decided["dry_run"]) == (crashed.host.name, "act", True)
    assert not [e for e in _events(tmp_path) if e["event"] == "acted"], "the watcher itself never acts"

    poll(lambda: _runs(log) >= 1, deadline=600, what=f"the rulebook's oom run\n{log.read_text()[-3000:]}")
    crashed.wait_healthy()
    assert crashed.generate(32768, 3).status == 200  # the 32k prefill that killed it is served
    fixed = time.monotonic()
    print(f"\ncrash line → fixed server through the watcher, ansible-rulebook and oom: {fixed - crash_seen:.1f} s")
    text = log.read_text()
    assert f"{crashed.host.name}" in text and "changed=1" in text, text[-3000:]
    assert crashed.bytes(UNIT_PATH) != original and len(crashed.backups(UNIT_PATH)) == 1
    assert crashed.show("NRestarts")  # the unit is up on the fixed bytes
    assert "--mem-fraction-static 0.93" in crashed.bytes(UNIT_PATH).decode()

    # The same decision again within the window: the throttle runs nothing. A decision for a host outside the
    # inventory follows it (events are handled in order): once its run shows (ansible-playbook: no hosts
    # matched), the repeat was handled. Without the throttle the repeat would run oom again (a second recap).
    _post(url, {"text": "again", "event": decided})
    _post(url, {"text": "marker", "event": {**decided, "host": "not-in-inventory", "incident": "00000000"}})
    poll(
        lambda: "not-in-inventory" in log.read_text(), deadline=300, what=f"the marker's run\n{log.read_text()[-3000:]}"
    )
    assert _runs(log) == 1, log.read_text()[-3000:]  # the first fix only: nothing ran for the repeat
    assert len(crashed.backups(UNIT_PATH)) == 1, "no second oom on the throttled host"
    assert _fingerprint(other) == other_before, "the other host untouched"
