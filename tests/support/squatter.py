"""Another server on the unit's port (a squatter): what it answers by ``mode`` (a good-looking document, a nested
one, a trickle), run as its own unit on the host. The health wait must never take it for the new server."""

from __future__ import annotations

SQUATTER_UNIT = "squatter.service"
SQUATTER = "/opt/squatter.py"
SQUATTER_SCRIPT = r"""
import json, socket, sys, threading, time
host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
INFO = json.dumps({"max_total_num_tokens": 195011, "version": "0.5.5", "model_path": "squatted"}).encode()

def answer(conn):
    with conn:
        request = conn.recv(65536).split(b" ")
        path = request[1] if len(request) > 1 else b"/"
        if mode == "trickle":
            conn.sendall(b"H")
            while True:  # one byte a second, forever
                time.sleep(1)
                conn.sendall(b"T")
        if path == b"/health":
            body = b""
        elif mode == "nested":
            body = b"[" * 100000 + b"]" * 100000
        else:
            body = INFO
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        conn.sendall(head + body)

server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, port))
server.listen(64)
while True:
    conn, _ = server.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"""
