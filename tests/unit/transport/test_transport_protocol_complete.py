"""The Transport protocol is the whole interface: every public method of the SSH and local transports is in it (so no
caller needs ``getattr`` or a ``type: ignore`` to reach one), and the scripted host implements each of them
with the same parameters (and defaults)."""

from __future__ import annotations

import inspect

import pytest

from remediate.transport.base import Transport
from remediate.transport.local import LocalTransport
from remediate.transport.ssh import SSHTransport
from tests.support.fake_transport import FakeTransport

SSH_ONLY = {
    "address"
}  # (user, hostname, port) as Fabric resolved them: for messages, never called through the protocol


def _methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(value)
        for name, value in vars(cls).items()
        if not name.startswith("_") and callable(value) and name not in SSH_ONLY
    }


PROTOCOL = _methods(Transport)


@pytest.mark.parametrize("implementation", [SSHTransport, LocalTransport], ids=["ssh", "local"])
def test_every_public_method_of_a_transport_is_in_the_protocol(implementation: type) -> None:
    assert set(_methods(implementation)) - set(PROTOCOL) == set()


@pytest.mark.parametrize("implementation", [SSHTransport, LocalTransport, FakeTransport], ids=["ssh", "local", "fake"])
@pytest.mark.parametrize("name", sorted(PROTOCOL))
def test_each_implementation_has_the_protocols_parameters(implementation: type, name: str) -> None:
    method = getattr(implementation, name, None)
    assert method is not None, f"{implementation.__name__} lacks {name}"
    want = [(p.name, p.kind, p.default) for p in PROTOCOL[name].parameters.values()]
    params = list(inspect.signature(method).parameters.values())
    assert [(p.name, p.kind, p.default) for p in params[: len(want)]] == want
    extra = params[len(want) :]  # an implementation's own knobs (ssh's max_body): keyword-only, with a default
    assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in extra), extra
