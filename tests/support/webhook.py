"""A webhook receiver on loopback (the ``hook`` fixture): what the watcher posts, answered 200 or 503."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest


@dataclass
class Hook:
    """A webhook receiver on loopback: the JSON bodies it was posted; it answers 503 ``failures`` times first."""

    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    failures: int = 0


@pytest.fixture
def hook() -> Iterator[Hook]:
    """A real HTTP server on 127.0.0.1 taking the watcher's posts (ended with the test)."""
    got = Hook()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            got.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            if got.failures > 0:
                got.failures -= 1
                self.send_response(503)
            else:
                self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    got.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
