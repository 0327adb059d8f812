"""A connection that dies under a command or a channel open is ConnectionLost (never EOFError escaping to a
fleet worker, never "exit -1" parsed as a result). paramiko's dying transport is stubbed: pytest-mock-free
fault injection of what the e2e cut (tests/e2e/test_faults.py) only hits now and then."""

from __future__ import annotations

from typing import Any

import pytest
from paramiko import ChannelException

from remediate.errors import ConnectionLost
from remediate.transport.ssh import SSHTransport


class _DeadTransport:
    """A paramiko Transport whose peer just went away."""

    def __init__(self, raises: BaseException) -> None:
        self.raises = raises
        self.active = True

    def is_active(self) -> bool:
        return self.active

    def open_channel(self, *args: Any, **kw: Any) -> Any:
        self.active = False
        raise self.raises

    def open_session(self, *args: Any, **kw: Any) -> Any:
        self.active = False
        raise self.raises


def _transport(dead: _DeadTransport, monkeypatch: pytest.MonkeyPatch) -> SSHTransport:
    ssh = SSHTransport("root@127.0.0.1:1")
    ssh._opened = True
    monkeypatch.setattr(ssh._conn.client, "get_transport", lambda: dead)
    return ssh


@pytest.mark.parametrize("error", [EOFError(), OSError("Socket is closed")], ids=["eof", "socket"])
def test_http_get_on_a_dying_connection_is_connection_lost(
    error: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh = _transport(_DeadTransport(error), monkeypatch)
    with pytest.raises(ConnectionLost):
        ssh.http_get("127.0.0.1", 30000, "/health")


def test_run_on_a_dying_connection_is_connection_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    ssh = _transport(_DeadTransport(EOFError()), monkeypatch)
    with pytest.raises(ConnectionLost):
        ssh.run("true", timeout=5)


class _RefusingTransport(_DeadTransport):
    """A live connection; only the server's port refuses (normal while the model loads)."""

    def open_channel(self, *args: Any, **kw: Any) -> Any:
        raise self.raises


def test_a_refused_channel_on_a_live_connection_is_data_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    ssh = _transport(_RefusingTransport(ChannelException(2, "Connect failed")), monkeypatch)
    response = ssh.http_get("127.0.0.1", 30000, "/health")
    assert response.status is None and "Connect failed" in (response.error or "")
