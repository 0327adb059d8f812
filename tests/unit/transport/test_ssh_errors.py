"""Every exception class paramiko and the socket layer can raise through our calls maps onto remediate's tree
(transport/ssh_errors.py ``translate_errors``), as httpx checks its own mapping
(tests/test_exceptions.py::test_httpcore_all_exceptions_mapped): the classes are enumerated from paramiko's
modules, so a paramiko that adds one fails here until it is mapped or said never to escape a call."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import socket
from collections.abc import Callable

import paramiko
import pytest
from paramiko.auth_strategy import AuthFailure, AuthResult
from paramiko.hostkeys import InvalidHostKey
from paramiko.ssh_exception import (
    AuthenticationException,
    BadAuthenticationType,
    BadHostKeyException,
    ChannelException,
    NoValidConnectionsError,
    PartialAuthentication,
    ProxyCommandFailure,
)

from remediate.errors import AuthError, TransportError
from remediate.transport.ssh_errors import translate_errors

# Raised inside paramiko and caught there, or by a feature remediate never uses: never out of a call of ours.
NEVER_ESCAPES = {
    "paramiko.ber.BERException": "paramiko/ber.py's own; no key or message remediate handles is BER-decoded",
    "paramiko.packet.NeedRekeyException": "paramiko/packet.py's signal to Transport.run (transport.py), caught there",
    "paramiko.pkey.UnknownKeyType": "caught by hostkeys.py HostKeyEntry.from_line and agent.py; SSHClient loads "
    "key_filename with from_private_key_file (SSHException)",
    "paramiko.sftp.SFTPError": "remediate opens no SFTP session",
}


class _Key:
    """What BadHostKeyException reads of a key."""

    def get_name(self) -> str:
        return "ssh-ed25519"

    def get_fingerprint(self) -> bytes:
        return b"\x01" * 16

    def get_base64(self) -> str:
        return "AAAAC3NzaC1lZDI1NTE5"


# The classes whose constructor takes more than a message.
MAKE: dict[type[BaseException], Callable[[], BaseException]] = {
    BadAuthenticationType: lambda: BadAuthenticationType("Bad authentication type", ["publickey"]),
    PartialAuthentication: lambda: PartialAuthentication(["publickey"]),
    AuthFailure: lambda: AuthFailure(AuthResult(strategy=None)),  # type: ignore[arg-type]
    BadHostKeyException: lambda: BadHostKeyException("gpu-01", _Key(), _Key()),  # type: ignore[arg-type]
    NoValidConnectionsError: lambda: NoValidConnectionsError({("192.0.2.1", 22): ConnectionRefusedError(111, "no")}),
    InvalidHostKey: lambda: InvalidHostKey("gpu-01 ssh-rsa AAAA!", ValueError("bad base64")),
    ProxyCommandFailure: lambda: ProxyCommandFailure("ssh -W %h:%p jump", "broken pipe"),
    ChannelException: lambda: ChannelException(2, "Connect failed"),
}


def paramiko_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in paramiko's modules (the Windows-only ones cannot load here)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.iter_modules(paramiko.__path__):
        try:
            module = importlib.import_module(f"paramiko.{info.name}")
        except (ImportError, AttributeError):  # _winapi, win_pageant, win_openssh: Windows only
            continue
        for cls in vars(module).values():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__.startswith("paramiko"):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[name] for name in sorted(found)]


def socket_exceptions() -> list[type[BaseException]]:
    """The socket layer's: socket's public classes (``_GiveupOnSendfile`` is socket.sendfile's own, caught there),
    the OSErrors a connection raises, EOF of a closed stream."""
    own = [
        c
        for name, c in vars(socket).items()
        if not name.startswith("_") and inspect.isclass(c) and issubclass(c, BaseException)
    ]
    return sorted({*own, *ConnectionError.__subclasses__(), ConnectionError, TimeoutError, EOFError}, key=str)


def _name(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _translated(exc: BaseException) -> BaseException:
    with pytest.raises(BaseException) as info, translate_errors("gpu-01"):
        raise exc
    return info.value


RAISED = [c for c in paramiko_exceptions() if _name(c) not in NEVER_ESCAPES] + socket_exceptions()


def test_paramiko_has_the_classes_this_test_knows() -> None:
    """The enumeration finds paramiko's tree (not an empty list that would pass anything)."""
    names = {_name(c) for c in paramiko_exceptions()}
    assert {"paramiko.ssh_exception.SSHException", "paramiko.ssh_exception.BadHostKeyException"} <= names
    assert set(NEVER_ESCAPES) <= names, set(NEVER_ESCAPES) - names  # stale entries go


@pytest.mark.parametrize("cls", RAISED, ids=_name)
def test_every_exception_a_call_can_raise_maps_to_our_tree(cls: type[BaseException]) -> None:
    exc = MAKE.get(cls, lambda: cls("boom"))()
    got = _translated(exc)
    assert isinstance(got, TransportError), f"{_name(cls)} escapes translate_errors as {type(got).__name__}"
    assert got.__cause__ is exc  # raise … from exc: the original stays in the traceback
    assert "gpu-01" in str(got)


@pytest.mark.parametrize(
    "cls", [c for c in RAISED if issubclass(c, AuthenticationException | BadHostKeyException | InvalidHostKey)]
)
def test_authentication_and_host_key_failures_are_auth_errors_never_retried(cls: type[BaseException]) -> None:
    assert isinstance(_translated(MAKE.get(cls, lambda: cls("boom"))()), AuthError)


def test_an_exception_outside_the_network_is_not_swallowed() -> None:
    """The mapping is for the network's exceptions: a bug (KeyError) stays a bug."""
    with pytest.raises(KeyError), translate_errors("gpu-01"):
        raise KeyError("ExecStart")
