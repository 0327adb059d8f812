"""A stand-in server as a subprocess (its own port, knobs file and GPU board), stopped by PID."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

STANDIN = Path(__file__).resolve().parents[2] / "sandbox" / "standin"
CAPACITY_RE = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+)(?:, available_(?:gpu|cpu)_mem=([\d.]+) GB)?"
)
INCIDENT = ["--model-path", "moonshotai/Kimi-K2.6", "--tp", "8", "--trust-remote-code", "--mem-fraction-static", "0.94"]
FIX = [*INCIDENT[:-1], "0.93", "--chunked-prefill-size", "4096"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, tmp: Path, args: list[str], knobs: dict, env: dict | None = None, module: str = "") -> None:
        self.port = _free_port()
        cfg = tmp / f"knobs-{self.port}.json"
        self.board = tmp / "board"
        cfg.write_text(json.dumps({"time_scale": 0.001, "gpu_state_dir": str(self.board), **knobs}))
        self.knobs_path = cfg
        self.log = tmp / f"out-{self.port}.log"
        full_env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
        full_env.update({"PYTHONPATH": str(STANDIN), "SGLANG_STANDIN_CONFIG": str(cfg), **(env or {})})
        argv = [sys.executable, "-m", module or "sglang.launch_server", *args]
        if module == "sglang.cli.main":
            argv.insert(3, "serve")
        argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.fh = self.log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self.fh, stderr=subprocess.STDOUT, env=full_env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text()

    def get(self, path: str, timeout: float = 5) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, path: str, body: dict, timeout: float = 10) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_healthy(self, deadline: float = 10) -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.output()
            try:
                if self.get("/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise AssertionError("not healthy in time:\n" + self.output())

    def wait_exit(self, deadline: float = 10) -> int:
        return self.proc.wait(timeout=deadline)

    def set_knobs(self, **knobs: object) -> None:
        """Rewrite the knobs file the running server (and nvidia-smi) read."""
        doc = json.loads(self.knobs_path.read_text())
        doc.update(knobs)
        tmp = self.knobs_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.knobs_path)  # atomic: the server re-reads it on every prefill

    def smi(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The nvidia-smi stand-in, reading this server's knobs and board."""
        env = {**os.environ, "SGLANG_STANDIN_CONFIG": str(self.knobs_path)}
        return subprocess.run([str(STANDIN / "bin" / "nvidia-smi"), *args], capture_output=True, text=True, env=env)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.fh.close()
