"""Unit files and ports for sandbox hosts, derived from the incident's unit (examples/incident/sglang.service)."""

from __future__ import annotations

import random
import re
import socket
import time
import urllib.request
from pathlib import Path

INCIDENT = Path(__file__).resolve().parent.parent / "examples" / "incident" / "sglang.service"


def sandbox_unit(text: str, listen: str | None = None, port: int | None = None) -> str:
    """A unit made runnable on a sandbox host.

    Sandbox hosts have no ``sglang`` user, so ``User=``/``Group=`` go. Hosts share the machine's network
    namespace, so when several servers run at once each must listen on its own address (and, across
    concurrent sessions, its own port): ``--host 0.0.0.0``/``--port 30000`` are replaced when given.
    """
    lines = [line for line in text.splitlines(keepends=True) if not re.match(r"\s*(User|Group)=", line)]
    text = "".join(lines)
    if listen:
        text = text.replace("--host 0.0.0.0", f"--host {listen}")
    if port:
        text = text.replace("--port 30000", f"--port {port}")
    return text


def incident_unit(listen: str | None = None, port: int | None = None) -> str:
    """The incident's unit, byte for byte but for the sandbox adjustments of :func:`sandbox_unit`."""
    text = sandbox_unit(INCIDENT.read_text(), listen, port)
    if port:
        assert f"--port {port}" in text, "examples/incident/sglang.service changed shape"
    return text


def free_port(address: str) -> int:
    """A port nobody listens on at ``address`` (a wildcard listener of another session counts)."""
    for _ in range(200):
        port = random.randint(31000, 39999)
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port on {address}")


def wait_http_ok(address: str, port: int, path: str = "/health", deadline: float = 60) -> bool:
    """Poll ``http://address:port/path`` until it answers 200 (True) or ``deadline`` seconds pass (False)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://{address}:{port}{path}", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:  # refused while the model loads, 503 while it warms up
            pass
        time.sleep(0.05)
    return False
