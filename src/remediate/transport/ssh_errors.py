"""paramiko's and the socket layer's exceptions onto remediate's tree: the one place that catches them (used by
transport/ssh.py around every step of a connection)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from paramiko.hostkeys import InvalidHostKey
from paramiko.ssh_exception import (
    AuthenticationException,
    BadHostKeyException,
    NoValidConnectionsError,
    PasswordRequiredException,
    SSHException,
)

from remediate.errors import AuthError, ConnectError, ConnectionLost
from remediate.transport.ssh_security import NOT_KNOWN, REVOKED


@contextmanager
def translate_errors(host: str) -> Iterator[None]:
    """Map paramiko/socket exceptions onto remediate's tree (the only place that catches them)."""
    try:
        yield
    except BadHostKeyException as exc:
        raise AuthError(
            host,
            f"host key mismatch (got {exc.key.get_name()} {exc.key.get_fingerprint().hex()}); "
            "refusing to connect: the host may have been reinstalled or this may be an attack",
        ) from exc
    except (AuthenticationException, PasswordRequiredException) as exc:
        raise AuthError(host, f"authentication failed: {exc}") from exc
    except NoValidConnectionsError as exc:
        raise ConnectError(host, f"connection refused ({exc.strerror or exc})") from exc
    except socket.gaierror as exc:
        raise ConnectError(host, f"cannot resolve host: {exc.strerror}") from exc
    except InvalidHostKey as exc:
        raise AuthError(host, f"unreadable known_hosts line: {exc.line!r}") from exc
    except EOFError as exc:
        raise ConnectionLost(host, "connection lost (EOF from the server)") from exc
    except TimeoutError as exc:
        raise ConnectError(host, "connection timed out") from exc
    except ConnectionError as exc:
        raise ConnectError(host, f"connection failed: {exc}") from exc
    except SSHException as exc:
        text = str(exc)
        if REVOKED in text:
            raise AuthError(host, f"{text}: refusing to connect") from exc
        if NOT_KNOWN in text:
            hint = text.partition(NOT_KNOWN)[2]
            raise AuthError(
                host,
                "unknown host key (not in known_hosts); verify it and add it, "
                f"or pass --accept-new-host-key to record it{hint}",
            ) from exc
        if "session not active" in text.lower() or "connection lost" in text.lower():
            raise ConnectionLost(host, f"connection lost ({text})") from exc
        raise ConnectError(host, f"SSH error: {text}") from exc
    except OSError as exc:
        raise ConnectError(host, f"connection failed: {exc}") from exc
