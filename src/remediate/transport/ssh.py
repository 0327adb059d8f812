"""SSH transport: the only module that imports fabric and paramiko.

Fabric resolves the target (``[user@]host[:port]``, ssh_config aliases, ``IdentityFile``, ``ProxyJump``)
but hard-codes ``AutoAddPolicy`` and never loads known_hosts (fabric#1804, #2071). We load the
user's and system known_hosts (or ``--known-hosts FILE``) into every client, gateways included, and
set ``RejectPolicy`` -- or, only when asked, an accept-new policy that records unknown keys like
OpenSSH's ``StrictHostKeyChecking=accept-new``. A changed key is always refused (paramiko raises
``BadHostKeyException`` for a known host whatever the policy).

Commands run on one paramiko session channel each over a single connection per host; HTTP probes
of the server go through a ``direct-tcpip`` channel of the same connection, so the remote host
needs no curl and the server may listen on 127.0.0.1 only.
"""

from __future__ import annotations

import logging
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import paramiko
from fabric import Config, Connection
from paramiko.ssh_exception import (
    AuthenticationException,
    BadHostKeyException,
    ChannelException,
    NoValidConnectionsError,
    PasswordRequiredException,
    SSHException,
)
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from remediate.errors import AuthError, CommandError, ConnectError, TransportError
from remediate.models import CommandResult
from remediate.transport.base import HttpResponse, SSHOptions
from remediate.transport.http1 import HttpStream, StreamBroken, request_bytes

# paramiko logs refused direct-tcpip channels (normal while a model loads) as errors; our callers get
# them as data. A NullHandler keeps Python's last-resort handler from printing them on stderr.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

_SUDO_PASSWORD_MARKERS = ("a password is required", "a terminal is required", "password for")

# Offered first, in this order, when paramiko has them (the rest follow in paramiko's own order, so a server
# that lacks these still negotiates): X25519 is the cheapest secure key exchange paramiko does, and AES-GCM
# authenticates as it encrypts (one pass, AES-NI) where AES-CTR needs a separate HMAC. See docs/PERFORMANCE.md.
PREFERRED_KEX = ("curve25519-sha256@libssh.org", "curve25519-sha256")
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def _preferred_first(preferred: tuple[str, ...], offered: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(a for a in preferred if a in offered) + tuple(a for a in offered if a not in preferred)


def _fast_transport(sock: object, disabled_algorithms: dict[str, list[str]] | None = None) -> paramiko.Transport:
    """paramiko's Transport with the fastest secure algorithms offered first (SSHClient's transport_factory);
    host-key verification is untouched (the client's known_hosts and policy)."""
    transport = paramiko.Transport(sock, disabled_algorithms=disabled_algorithms)  # type: ignore[arg-type]
    security = transport.get_security_options()
    security.kex = _preferred_first(PREFERRED_KEX, tuple(security.kex))
    security.ciphers = _preferred_first(PREFERRED_CIPHERS, tuple(security.ciphers))
    return transport


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Record an unknown key (never a changed one) in the known_hosts file, like ssh's accept-new."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        with self._lock:
            client.get_host_keys().add(hostname, key.get_name(), key)
            self._path.parent.mkdir(parents=True, exist_ok=True)
            with self._path.open("a", encoding="utf-8") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


@contextmanager
def _translate_errors(host: str) -> Iterator[None]:
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
    except TimeoutError as exc:
        raise ConnectError(host, "connection timed out") from exc
    except ConnectionError as exc:
        raise ConnectError(host, f"connection failed: {exc}") from exc
    except SSHException as exc:
        text = str(exc)
        if "not found in known_hosts" in text:
            raise AuthError(
                host,
                "unknown host key (not in known_hosts); verify it and add it, "
                "or pass --accept-new-host-key to record it",
            ) from exc
        raise ConnectError(host, f"SSH error: {text}") from exc
    except OSError as exc:
        raise ConnectError(host, f"connection failed: {exc}") from exc


class SSHTransport:
    """One verified SSH connection to one host."""

    def __init__(self, target: str, options: SSHOptions | None = None, *, label: str | None = None) -> None:
        self.options = options or SSHOptions()
        self.target = target
        self.host = label or target
        overrides: dict[str, object] = {"load_ssh_configs": True}
        if self.options.ssh_config:
            overrides["ssh_config_path"] = self.options.ssh_config
        config = Config(overrides=overrides)
        if self.options.ssh_config:
            config.set_runtime_ssh_path(self.options.ssh_config)
            config.load_ssh_config()
        connect_kwargs: dict[str, object] = {}
        if self.options.identity:
            connect_kwargs["key_filename"] = [self.options.identity]
            connect_kwargs["look_for_keys"] = False
        self._conn = Connection(
            target,
            user=self.options.user,
            port=self.options.port,
            config=config,
            connect_timeout=int(self.options.connect_timeout),
            connect_kwargs=connect_kwargs,
        )
        gateway = self._conn.gateway
        if isinstance(gateway, str):
            raise TransportError(self.host, "ProxyCommand is not supported; use ProxyJump")
        hop: Connection | None = self._conn
        while hop is not None:
            self._secure(hop)
            if identity := self.options.identity:
                hop.connect_kwargs.setdefault("key_filename", [identity])
            hop.connect_kwargs.setdefault("transport_factory", _fast_transport)
            nxt = hop.gateway
            hop = nxt if isinstance(nxt, Connection) else None
        self._opened = False

    @property
    def address(self) -> tuple[str, str, int]:
        """(user, hostname, port) as resolved from the target and ssh_config."""
        return (str(self._conn.user), str(self._conn.host), int(self._conn.port))

    def _secure(self, hop: Connection) -> None:
        """Load host keys into the hop's client and replace Fabric's AutoAddPolicy before it connects.

        Sources, first match wins: --known-hosts FILE; the ssh_config's UserKnownHostsFile (and
        GlobalKnownHostsFile) for that host; ~/.ssh/known_hosts plus /etc/ssh/ssh_known_hosts.
        """
        client: paramiko.SSHClient = hop.client
        files: list[Path]
        if self.options.known_hosts:
            files = [Path(self.options.known_hosts).expanduser()]
        elif "userknownhostsfile" in hop.ssh_config:
            files = [Path(p).expanduser() for p in str(hop.ssh_config["userknownhostsfile"]).split()]
            files += [Path(p).expanduser() for p in str(hop.ssh_config.get("globalknownhostsfile", "")).split()]
        else:
            files = [Path("~/.ssh/known_hosts").expanduser()]
            files += [Path(p) for p in ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")]
        keys = client.get_host_keys()
        for path in files:
            if path.is_file():
                keys.load(str(path))
        policy: paramiko.MissingHostKeyPolicy = (
            _AcceptNewPolicy(files[0]) if self.options.accept_new_host_key else paramiko.RejectPolicy()
        )
        client.set_missing_host_key_policy(policy)

    def open(self) -> None:
        """Connect and authenticate (host key verified). Idempotent."""
        if self._opened:
            return
        # A refused or reset connection (sshd restarting, MaxStartups under a fleet's fan-out) is retried,
        # briefly and with jitter; authentication and host-key failures are final at once.
        retrying = Retrying(
            retry=retry_if_exception_type(ConnectError),
            wait=wait_random_exponential(multiplier=0.2, max=2.0),
            stop=stop_after_attempt(self.options.connect_attempts),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                self._connect_once()
        self._opened = True
        if self.options.sudo:
            probe = self.run("true")
            if not probe.ok:
                raise self._sudo_error(probe)

    def _connect_once(self) -> None:
        try:
            with _translate_errors(self.host):
                self._conn.open()
        except ConnectError:
            self._conn.close()  # a half-open client must not be reused by the next attempt
            raise

    def _sudo_error(self, result: CommandResult) -> TransportError:
        text = result.stderr.lower()
        if any(marker in text for marker in _SUDO_PASSWORD_MARKERS):
            return AuthError(
                self.host,
                f"sudo for user {self._conn.user!r} needs a password; remediate uses `sudo -n` "
                "(configure NOPASSWD for this user, or connect as root)",
            )
        return AuthError(self.host, f"sudo failed: {result.stderr.strip() or result.exited}")

    def _wrap(self, command: str) -> str:
        if self.options.sudo:
            return "sudo -n -- bash -c " + shlex.quote(command)
        return command

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> CommandResult:
        """Run ``command`` through the login shell (as root via ``sudo -n`` with --sudo)."""
        if not self._opened:
            self.open()
        wrapped = self._wrap(command)
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError(self.host, "connection lost")
        with _translate_errors(self.host):
            chan = transport.open_session(timeout=self.options.connect_timeout)
            try:
                chan.exec_command(wrapped)
                if stdin is not None:
                    chan.sendall(stdin.encode("utf-8"))
                chan.shutdown_write()
                out, err = _drain(chan, self.host, timeout)
                exited = chan.recv_exit_status()
            finally:
                chan.close()
        return CommandResult(
            argv=command,
            exited=exited,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
        )

    @contextmanager
    def hold(self, command: str, *, ready: str, timeout: float) -> Iterator[str]:
        """Keep ``command`` running on its own channel for the duration of the context; closing the
        channel (or losing the connection) ends it, so a lock it holds can never outlive this process."""
        if not self._opened:
            self.open()
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError(self.host, "connection lost")
        marker = ready.encode() + b"\n"
        with _translate_errors(self.host):
            chan = transport.open_session(timeout=self.options.connect_timeout)
        try:
            with _translate_errors(self.host):
                chan.exec_command(self._wrap(command))
                chan.settimeout(0.1)
                seen = b""
                deadline = time.monotonic() + timeout
                while not (seen.startswith(marker) or b"\n" + marker in seen):
                    if chan.exit_status_ready() and not chan.recv_ready():
                        err = chan.recv_stderr(65536) if chan.recv_stderr_ready() else b""
                        result = CommandResult(command, chan.recv_exit_status(), seen.decode(), err.decode())
                        raise CommandError(self.host, "hold", result)
                    if time.monotonic() > deadline:
                        raise ConnectError(self.host, f"no {ready!r} from the host within {timeout:.0f}s")
                    try:
                        seen += chan.recv(65536)
                    except TimeoutError:
                        continue
            yield seen.decode("utf-8", "replace")
        finally:
            chan.close()

    def http_get(self, host: str, port: int, path: str, *, timeout: float = 5.0) -> HttpResponse:
        """GET through a direct-tcpip channel; ``status=None`` while the port refuses connections."""
        if not self._opened:
            self.open()
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError(self.host, "connection lost")
        try:
            chan = transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
        except ChannelException as exc:
            return HttpResponse(status=None, body=b"", error=f"{host}:{port}: {exc.text}")
        except SSHException as exc:
            return HttpResponse(status=None, body=b"", error=str(exc))
        try:
            chan.settimeout(timeout)
            request = f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nAccept: */*\r\nConnection: close\r\n\r\n"
            chan.sendall(request.encode("ascii"))
            chunks: list[bytes] = []
            while True:
                data = chan.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except TimeoutError:
            return HttpResponse(status=None, body=b"", error=f"{host}:{port}{path}: timed out")
        except (SSHException, OSError) as exc:
            return HttpResponse(status=None, body=b"", error=f"{host}:{port}{path}: {exc}")
        finally:
            chan.close()
        return _parse_http(b"".join(chunks))

    @contextmanager
    def http_stream(
        self, host: str, port: int, path: str, body: bytes, *, timeout: float = 600.0, method: str = "POST"
    ) -> Iterator[HttpStream]:
        """Send a request through a direct-tcpip channel and read the answer as it arrives; ``status`` is None
        while the port refuses connections. Arrival times are ``time.perf_counter()``; ``timeout`` bounds
        each wait for more bytes."""
        if not self._opened:
            self.open()
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError(self.host, "connection lost")
        clock = time.perf_counter
        try:
            chan = transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
        except ChannelException as exc:
            yield HttpStream(lambda: b"", clock, clock(), error=f"{host}:{port}: {exc.text}")
            return
        except SSHException as exc:
            yield HttpStream(lambda: b"", clock, clock(), error=str(exc))
            return
        where = f"{host}:{port}{path}"

        def recv() -> bytes:
            try:
                return bytes(chan.recv(65536))
            except TimeoutError:
                raise StreamBroken(f"{where}: no data for {timeout:.0f}s") from None
            except (SSHException, OSError) as exc:
                raise StreamBroken(f"{where}: {exc}") from None

        try:
            chan.settimeout(timeout)
            sent_at = clock()
            try:
                chan.sendall(request_bytes(method, host, port, path, body))
            except (TimeoutError, SSHException, OSError) as exc:
                yield HttpStream(lambda: b"", clock, sent_at, error=f"{where}: sending failed: {exc}")
                return
            yield HttpStream(recv, clock, sent_at)
        finally:
            chan.close()

    def http_post(self, host: str, port: int, path: str, body: bytes = b"", *, timeout: float = 30.0) -> HttpResponse:
        """POST through a direct-tcpip channel and read the whole answer."""
        with self.http_stream(host, port, path, body, timeout=timeout) as stream:
            data = stream.read()
        if stream.status is None or stream.error:
            return HttpResponse(status=stream.status, body=data, error=stream.error)
        return HttpResponse(status=stream.status, body=data)

    def close(self) -> None:
        self._conn.close()
        self._opened = False


def _drain(chan: paramiko.Channel, host: str, timeout: float | None) -> tuple[bytes, bytes]:
    """Read stdout and stderr until the command exits; data precedes exit-status on the channel."""
    deadline = None if timeout is None else time.monotonic() + timeout
    out: list[bytes] = []
    err: list[bytes] = []
    while True:
        got = False
        while chan.recv_ready():
            out.append(chan.recv(65536))
            got = True
        while chan.recv_stderr_ready():
            err.append(chan.recv_stderr(65536))
            got = True
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            break
        if deadline is not None and time.monotonic() > deadline:
            raise ConnectError(host, f"remote command timed out after {timeout:.0f}s")
        if not got:
            chan.status_event.wait(0.01)
    return b"".join(out), b"".join(err)


def _parse_http(raw: bytes) -> HttpResponse:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return HttpResponse(status=None, body=raw, error=f"bad HTTP response: {status_line!r}")
    return HttpResponse(status=int(parts[1]), body=body)
