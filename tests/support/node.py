"""The e2e tests' driver of a sandbox host: a host wrapper (files, units, HTTP from inside, polling) and the CLI
run as a subprocess (its fixtures, ``node`` and ``incident``, are in tests/e2e/conftest.py).

Every sandbox host shares the machine's network namespace (and other sessions may run sandboxes too), so
a unit must not listen on 0.0.0.0:30000: the sandbox-ready texts bind the server to the host's own
loopback address and a port found free there. The sandbox has no ``sglang`` user, so ``User=``/``Group=``
lines are dropped. ``examples/`` stays untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox import Sandbox, SandboxHost
from sandbox.units import incident_unit

REPO = Path(__file__).resolve().parents[2]
INCIDENT_UNIT = REPO / "examples" / "incident" / "sglang.service"
UNIT = "sglang.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
STANDIN = "/opt/sglang/standin"
FAST_KNOBS = {"time_scale": 0.001}  # a load takes ~0.5 s (450 simulated s)
CLI_TIMEOUT = 120.0


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode())


# Runs inside the host: one HTTP request with urllib, printed as one JSON line.
_HTTP = r"""
import json, sys, urllib.error, urllib.request
url, method, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
body = sys.stdin.read()
req = urllib.request.Request(url, data=body.encode() if body else None, method=method,
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=timeout) as r:
        print(json.dumps({"status": r.status, "body": r.read().decode()}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "body": e.read().decode()}))
except Exception as e:
    print(json.dumps({"status": None, "body": "", "error": repr(e)}))
"""


@dataclass
class Http:
    status: int | None
    body: str
    error: str | None = None

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class CliRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    document: dict[str, Any] | None = None

    @property
    def result(self) -> dict[str, Any]:
        assert self.document is not None, f"no JSON on stdout:\n{self.stdout}\n{self.stderr}"
        (only,) = self.document["results"]
        return only

    def __str__(self) -> str:
        if self.document is not None:
            brief = {k: r.get(k) for r in self.document["results"] for k in ("host", "outcome", "error", "notes")}
            return f"exit {self.returncode}: {brief}\n--- stderr\n{self.stderr}"
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    __repr__ = __str__


def poll(predicate: Callable[[], Any], *, deadline: float, what: str, every: float = 0.02) -> Any:
    """Return the first truthy value of ``predicate()``; fail with ``what`` after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline}s waiting for {what}")
        time.sleep(every)


@dataclass
class Node:
    """One sandbox host as the e2e tests see it."""

    fleet: Sandbox
    host: SandboxHost
    tmp_path: Path
    port: int
    children: list[subprocess.Popen[str]] = field(default_factory=list)

    # -- files -------------------------------------------------------------------------------------
    def bytes(self, inside: str) -> bytes:
        return self.host.path(inside).read_bytes()

    def sha(self, inside: str) -> str:
        return sha256_bytes(self.bytes(inside))

    def mode(self, inside: str) -> int:
        return self.host.path(inside).stat().st_mode & 0o7777

    def ls(self, directory: str) -> list[str]:
        """Names in ``directory`` that the host's image does not have (what tests and the tool put there)."""
        path = self.host.path(directory)
        if not path.is_dir():
            return []
        image = self.fleet.image / directory.lstrip("/")
        return sorted(p.name for p in path.iterdir() if not os.path.lexists(image / p.name))

    def backups(self, inside: str) -> list[str]:
        directory, name = os.path.split(inside)
        return [f"{directory}/{n}" for n in self.ls(directory) if n.startswith(name + ".bak.oom.")]

    # -- units -------------------------------------------------------------------------------------
    def install(self, text: str, *, name: str = UNIT, mode: int = 0o640, start: bool = True) -> None:
        """Write the unit (mode 0640, so mode preservation is observable), reload, start, wait healthy."""
        self.host.write(f"/etc/systemd/system/{name}", text, mode=mode)
        self.host.systemctl("daemon-reload", check=True)
        if start:
            result = self.host.systemctl("start", name)
            assert result.returncode == 0, result.stderr
            self.wait_healthy(name)

    def install_incident(self, **kw: Any) -> str:
        text = incident_unit(self.host.address, self.port)
        self.install(text, **kw)
        return text

    def show(self, *props: str, unit: str = UNIT) -> dict[str, str]:
        return self.host.show(unit, *props)

    def journal(self, unit: str = UNIT) -> list[str]:
        return self.host.journal(unit)

    def audit(self) -> list[str]:
        return self.host.audit()

    # -- the server, from inside the host ----------------------------------------------------------
    def http(self, method: str, path: str, body: Any = None, *, timeout: float = 30) -> Http:
        url = f"http://{self.host.address}:{self.port}{path}"
        payload = "" if body is None else json.dumps(body)
        out = self.host.run(
            "/usr/bin/python3", "-c", _HTTP, url, method, str(timeout), input=payload, timeout=timeout + 10
        )
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        return Http(data["status"], data.get("body", ""), data.get("error"))

    def generate(self, n_tokens: int, seed: int, *, max_new_tokens: int = 4) -> Http:
        """A /generate of ``n_tokens`` unique tokens (no prefix-cache hit across seeds)."""
        ids = [(seed * 7919 + i) % 150_000 + 1 for i in range(n_tokens)]
        return self.http("POST", "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens}})

    def healthy(self) -> bool:
        return self.http("GET", "/health", timeout=2).status == 200

    def wait_healthy(self, unit: str = UNIT, deadline: float = 30) -> None:
        def check() -> bool:
            state = self.show("ActiveState", unit=unit)["ActiveState"]
            assert state != "failed", "\n".join(self.journal(unit)[-30:])
            return self.healthy()

        poll(check, deadline=deadline, what=f"{unit} healthy on {self.host.name}", every=0.05)

    def server_info(self) -> dict[str, Any]:
        info = self.http("GET", "/server_info")
        assert info.status == 200, info
        return info.json()

    def server_env(self, unit: str = UNIT) -> dict[str, str]:
        """The environment of the unit's running main process (from /proc)."""
        pid = self.show("MainPID", unit=unit)["MainPID"]
        assert pid not in ("", "0"), f"{unit} has no main process"
        raw = self.host.run("/bin/cat", f"/proc/{pid}/environ").stdout
        return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)

    def server_argv(self, unit: str = UNIT) -> list[str]:
        pid = self.show("MainPID", unit=unit)["MainPID"]
        raw = self.host.run("/bin/cat", f"/proc/{pid}/cmdline").stdout
        return [word for word in raw.split("\0") if word]

    # -- the CLI -----------------------------------------------------------------------------------
    def argv(self, command: str, *args: str, target: str | None = None, ssh_config: bool = True) -> list[str]:
        argv = remediate_argv(command, target or self.host.name)
        if ssh_config:
            argv += ["--ssh-config", str(self.fleet.ssh_config)]
        return argv + list(args)

    def cli(
        self, command: str, *args: str, target: str | None = None, ssh_config: bool = True, json_out: bool = True
    ) -> CliRun:
        argv = self.argv(command, *args, target=target, ssh_config=ssh_config) + (["--json"] if json_out else [])
        return run_cli(argv, cwd=self.tmp_path, env=self.env())

    @property
    def observations(self) -> Path:
        """This test's calibration log (every healthy oom/rollback appends to it): in its state directory."""
        return Path(os.environ["REMEDIATE_STATE_DIR"]) / "observations.jsonl"

    def env(self) -> dict[str, str]:
        return {**_cli_env(), "XDG_STATE_HOME": str(self.tmp_path / "state")}

    def popen(self, command: str, *args: str) -> subprocess.Popen[str]:
        """Start the CLI in the background (--json); killed by PID at teardown if still running."""
        argv = self.argv(command, *args) + ["--json"]
        proc = subprocess.Popen(
            argv,
            cwd=self.tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(),
            start_new_session=True,
        )
        self.children.append(proc)
        return proc

    def finish(self, proc: subprocess.Popen[str]) -> CliRun:
        stdout, stderr = proc.communicate(timeout=CLI_TIMEOUT)
        document = json.loads(stdout) if stdout.strip() else None
        return CliRun(list(proc.args), proc.returncode, stdout, stderr, document)  # type: ignore[arg-type]

    def cleanup(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def remediate_argv(*args: str) -> list[str]:
    """``python -m remediate ARGS`` with this interpreter."""
    return [sys.executable, "-m", "remediate", *args]


def run_cli(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT) -> CliRun:
    """Run the CLI in ``cwd``; with ``--json`` among its words, stdout's document is parsed (None if it is not one)."""
    proc = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_cli_env() if env is None else env
    )
    document = None
    if "--json" in argv and proc.stdout.strip():
        try:
            document = json.loads(proc.stdout)
        except ValueError:
            document = None
    return CliRun(argv, proc.returncode, proc.stdout, proc.stderr, document)


def _cli_env() -> dict[str, str]:
    # No REMEDIATE_* option leaks in from the caller's shell; the state dir stays the test's temp dir.
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_") or k == "REMEDIATE_STATE_DIR"}
    env["COLUMNS"] = "200"
    return env
