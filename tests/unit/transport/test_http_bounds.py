"""transport/http1.py against a real local HTTP server (a socket server thread): every answer is bounded in
time (one total deadline across all reads, not per read) and in size (head and body), and a bad answer is an
error value, never a hang, a truncated document or a crash."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from remediate.transport.http1 import HttpResponse, HttpStream, channel_recv, request_bytes

Serve = Callable[[socket.socket], None]


@contextmanager
def server(serve: Serve) -> Iterator[int]:
    """A one-connection HTTP server on 127.0.0.1 that answers with ``serve``; stopped and joined on exit."""
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)  # the request
            try:
                serve(conn)
            except OSError:
                pass  # the client closed: the rest of an answer it did not want

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(timeout=10)
        assert not thread.is_alive()


def get(port: int, *, idle: float = 5.0, total: float = 5.0, max_body: int = 1 << 20) -> HttpResponse:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request_bytes("GET", "127.0.0.1", port, "/health"))
        recv = channel_recv(sock, f"127.0.0.1:{port}/health", idle=idle, total=total)
        return HttpStream(recv, time.perf_counter, time.perf_counter(), max_body=max_body).response()


def trickle(data: bytes, gap: float = 0.02) -> Serve:
    """Send ``data`` one byte per ``gap`` seconds, then keep trickling spaces until the client leaves."""

    def serve(conn: socket.socket) -> None:
        for i in range(len(data)):
            conn.sendall(data[i : i + 1])
            time.sleep(gap)
        while True:
            conn.sendall(b" ")
            time.sleep(gap)

    return serve


def test_a_complete_answer_is_read_whole() -> None:
    body = b'{"max_total_num_tokens": 195011}'
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    with server(lambda conn: conn.sendall(head + body)) as port:
        assert get(port) == HttpResponse(status=200, body=body)


def test_a_chunked_answer_is_read_whole() -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    with server(lambda conn: conn.sendall(answer)) as port:
        assert get(port) == HttpResponse(status=200, body=b"hello world")


def test_a_trickling_head_is_cut_at_the_total_deadline_though_every_read_gets_a_byte() -> None:
    # one byte every 20 ms: a per-read timeout of 5 s never fires; the total deadline of 0.5 s does
    with server(trickle(b"HTTP/1.1 200 OK\r\nX-Slow: ")) as port:
        response = get(port, idle=5.0, total=0.5)
    assert response.status is None
    assert response.error is not None and "no complete answer within" in response.error


def test_a_trickling_body_is_cut_at_the_total_deadline() -> None:
    with server(trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{", gap=0.001)) as port:
        response = get(port, idle=5.0, total=0.5)
    assert response.status is None  # never a partial body taken for the document
    assert response.error is not None and "no complete answer within" in response.error


def test_a_body_past_the_cap_is_an_error_not_a_truncated_document() -> None:
    def serve(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")  # delimited by the close: endless
        while True:
            conn.sendall(b"[" * 65536)

    with server(serve) as port:
        response = get(port, max_body=1 << 20)
    assert response.status is None
    assert response.error == f"response body larger than {1 << 20} bytes"


def test_a_head_past_the_cap_is_an_error() -> None:
    def serve(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            conn.sendall(b"X-Pad: " + b"a" * 8000 + b"\r\n")

    with server(serve) as port:
        response = get(port)
    assert response.status is None
    assert response.error is not None and "response head larger than" in response.error


def test_an_idle_peer_is_cut_by_the_per_read_bound() -> None:
    with server(lambda conn: (conn.sendall(b"HTTP/1.1 200 OK\r\n"), time.sleep(1.0))) as port:
        response = get(port, idle=0.2, total=5.0)
    assert response.status is None
    assert response.error is not None and "no data for" in response.error


@pytest.mark.parametrize("cut", [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", b"HTTP/1.1 200"])
def test_an_answer_cut_short_is_an_error(cut: bytes) -> None:
    with server(lambda conn: conn.sendall(cut)) as port:
        response = get(port)
    assert response.status is None and response.error
