"""systemd's sd_notify, the tiny stdlib way: READY=1 once the first round is done, WATCHDOG=1 each round,
STOPPING=1 on the way out (sd_notify(3); a datagram to $NOTIFY_SOCKET, an abstract socket when it starts
with '@'). Without NOTIFY_SOCKET it does nothing."""

from __future__ import annotations

import os
import socket


def sd_notify(state: str, socket_path: str | None = None) -> bool:
    """Send ``state`` (``READY=1`` …); False when not run under systemd's notify protocol or on error."""
    path = socket_path if socket_path is not None else os.environ.get("NOTIFY_SOCKET", "")
    if not path.startswith(("/", "@")):
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), address)
    except OSError:
        return False
    return True
