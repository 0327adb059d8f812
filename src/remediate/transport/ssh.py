"""SSH transport: with ssh_security.py (algorithms, host keys), the only modules that import fabric and paramiko.

Fabric resolves the target (``[user@]host[:port]``, ssh_config aliases, ``IdentityFile``, ``ProxyJump``)
but hard-codes ``AutoAddPolicy`` and never loads known_hosts (fabric#1804, #2071). We load the
user's and system known_hosts (or ``--known-hosts FILE``) into every client, gateways included, and
set ``RejectPolicy`` -- or, only when asked, an accept-new policy that records unknown keys like
OpenSSH's ``StrictHostKeyChecking=accept-new``. A changed key is always refused (paramiko raises
``BadHostKeyException`` for a known host whatever the policy).

Commands run on one session channel each over one connection per host (keepalives on); HTTP probes go
through ``direct-tcpip`` channels of it (no curl needed; the server may listen on 127.0.0.1 only). A
dying connection is ``ConnectionLost`` everywhere; ``reconnect`` connects again and re-takes the holds.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import paramiko
from fabric import Config, Connection
from paramiko.ssh_exception import (
    ChannelException,
    SSHException,
)
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_before_delay, wait_random_exponential

from remediate.errors import AuthError, CommandError, ConnectError, ConnectionLost, TransportError
from remediate.models import CommandResult
from remediate.transport.ahead import Ahead
from remediate.transport.base import MAX_OUTPUT_BYTES, Followed, HttpResponse, SSHOptions
from remediate.transport.channels import ChannelLines, Heartbeat, Hold, Holds, drain
from remediate.transport.http1 import (
    MAX_DOCUMENT_BYTES,
    MAX_STREAM_BYTES,
    HttpStream,
    exchange,
    request_bytes,
)
from remediate.transport.preconnect import Preconnect
from remediate.transport.ssh_errors import translate_errors
from remediate.transport.ssh_security import HostKeyPolicy, fast_transport, load_keys

# paramiko logs refused direct-tcpip channels (normal while a model loads) as errors; our callers get
# them as data. A NullHandler keeps Python's last-resort handler from printing them on stderr.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

_SUDO_PASSWORD_MARKERS = ("a password is required", "a terminal is required", "password for")
KEEPALIVE_S = 10  # SSH keepalive: a dead peer is noticed while a long command or the health wait runs
HEARTBEAT_S = 5.0  # a line to every hold's stdin this often (templates/probe.sh.j2: heartbeat_timeout)
COMMAND_TIMEOUT_S = 600.0  # a command given no timeout of its own: nothing waits forever


def _command_name(command: str) -> str:
    """The command as an error names it: its first line, shortened (a script's body is not a name)."""
    first = command.strip().split("\n", 1)[0]
    return "`" + (first if len(first) <= 80 else first[:77] + "...") + "`"


class SSHTransport(Holds):
    """One verified SSH connection to one host."""

    def __init__(
        self,
        target: str,
        options: SSHOptions | None = None,
        *,
        label: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``sleep``: how the connect retries pause (``time.sleep``; tests record the pauses instead)."""
        self.options = options or SSHOptions()
        self._sleep = sleep
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
            hop.connect_kwargs.setdefault("transport_factory", fast_transport)
            nxt = hop.gateway
            hop = nxt if isinstance(nxt, Connection) else None
        self._opened = False
        self._holds: list[Hold] = []
        self._beat = Heartbeat(self._holds, HEARTBEAT_S, self.host)
        self._ahead: Ahead | None = None
        self._pre: Preconnect | None = None

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
        record = files[0] if self.options.accept_new_host_key else None
        client.set_missing_host_key_policy(HostKeyPolicy(record, load_keys(client.get_host_keys(), files)))

    def open_ahead(self) -> None:
        """Start connecting in the background (transport/ahead.py); :meth:`open` waits for it."""
        if not self._opened and self._ahead is None:
            self._ahead = Ahead(self._open_now, f"connect-{self.host}")

    def _join_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.join()

    def open(self) -> None:
        """Connect and authenticate (host key verified). Idempotent."""
        self._join_ahead()
        self._open_now()

    def _open_now(self) -> None:
        if self._opened:
            return
        # A refused or reset connection (sshd restarting, MaxStartups under a fleet's fan-out) is retried,
        # briefly and with jitter; authentication and host-key failures are final at once.
        retrying = Retrying(
            retry=retry_if_exception_type(ConnectError),
            wait=wait_random_exponential(multiplier=0.2, max=2.0),
            stop=stop_after_attempt(self.options.connect_attempts),
            sleep=self._sleep,
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                self._connect_once()
        self._opened = True
        if self.options.sudo:
            probe = self.run("true", timeout=self.options.connect_timeout + 20)
            if not probe.ok:
                raise self._sudo_error(probe)

    def preconnected(self, pre: Preconnect) -> None:
        """A TCP connection already under way (transport/preconnect.py), for the first connect to adopt."""
        self._pre = pre

    def _connect_once(self) -> None:
        pre, self._pre = self._pre, None
        if pre is not None:  # adopted only where Fabric resolved this host to, and without a gateway
            sock = pre.take(str(self._conn.host), int(self._conn.port)) if self._conn.gateway is None else None
            pre.close()
            if sock is not None:
                self._conn.connect_kwargs["sock"] = sock
        try:
            with translate_errors(self.host):
                self._conn.open()
                transport = self._conn.client.get_transport()
                if transport is not None:
                    transport.set_keepalive(KEEPALIVE_S)
        except ConnectError:
            self._conn.close()  # a half-open client must not be reused by the next attempt
            raise
        finally:
            self._conn.connect_kwargs.pop("sock", None)  # a retry connects anew

    def reconnect(self, within: float) -> None:
        """Connect again after a lost connection — capped backoff, for at most ``within`` seconds — and take
        back every hold still open, each with its own :class:`Retake` when it has one (the unit's lock: for the
        unit found, after any commit script of this run is done; ``@@locked`` required). Auth and host-key
        failures are final at once; a hold that cannot be taken back is CommandError (or ConnectError)."""
        self._conn.close()
        self._opened = False
        deadline = time.monotonic() + max(within, 1.0)
        retrying = Retrying(
            retry=retry_if_exception_type(ConnectError),
            wait=wait_random_exponential(multiplier=0.2, max=2.0),
            stop=stop_before_delay(max(within, 1.0)),
            sleep=self._sleep,
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                self._connect_once()
        self._opened = True
        for held in list(self._holds):
            self._take_back(held, deadline)

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

    def _active(self) -> paramiko.Transport:
        if not self._opened:
            self.open()
        transport: paramiko.Transport | None = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectionLost(self.host, "connection lost")
        return transport

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> CommandResult:
        """Run ``command`` through the login shell (as root via ``sudo -n`` with --sudo).

        ``timeout`` (else :data:`COMMAND_TIMEOUT_S`) is total: sending stdin, the run and reading its output to
        the end. ConnectionLost when the connection dies (or the timeout passes) before the command's exit
        status arrives: the command may then have run, in part or to its end. TransportError past
        :data:`MAX_OUTPUT_BYTES` of output."""
        wrapped = self._wrap(command)
        total = COMMAND_TIMEOUT_S if timeout is None else timeout
        what = _command_name(command)
        with translate_errors(self.host):
            transport = self._active()
            chan = transport.open_session(timeout=self.options.connect_timeout)
            try:
                deadline = time.monotonic() + total
                chan.settimeout(total)
                chan.exec_command(wrapped)
                if stdin is not None:
                    try:
                        chan.sendall(stdin.encode("utf-8"))
                    except TimeoutError:
                        raise ConnectionLost(self.host, f"{what}: timed out after {total:.0f}s") from None
                chan.shutdown_write()
                left = max(deadline - time.monotonic(), 0.0)
                out, err = drain(chan, self.host, left, what=what, limit=MAX_OUTPUT_BYTES)
                exited = chan.recv_exit_status()
                if exited == -1 and not transport.is_active():
                    raise ConnectionLost(self.host, "connection lost while a command ran")
            finally:
                chan.close()
        return CommandResult(
            argv=command,
            exited=exited,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
        )

    def _start_hold(self, held: Hold, timeout: float, command: str | None = None) -> None:
        marker = held.ready.encode() + b"\n"
        command = command or held.command
        with translate_errors(self.host):
            chan = self._active().open_session(timeout=self.options.connect_timeout)
        held.chan = chan
        try:
            with translate_errors(self.host):
                chan.exec_command(self._wrap(command))
                chan.settimeout(0.1)
                seen = bytearray()
                deadline = time.monotonic() + timeout
                scanned = 0  # the marker is searched for in new bytes only (a large read stays linear)
                while not (seen.startswith(marker) or seen.find(b"\n" + marker, max(scanned - len(marker), 0)) >= 0):
                    scanned = len(seen)
                    if len(seen) > MAX_OUTPUT_BYTES:
                        raise TransportError(self.host, f"more than {MAX_OUTPUT_BYTES} bytes before {held.ready!r}")
                    if chan.exit_status_ready() and not chan.recv_ready():
                        err = chan.recv_stderr(65536) if chan.recv_stderr_ready() else b""
                        status = chan.recv_exit_status()
                        if status == -1:
                            raise ConnectionLost(self.host, f"connection lost before {held.ready!r}")
                        result = CommandResult(command, status, seen.decode("utf-8", "replace"), err.decode())
                        raise CommandError(self.host, "hold", result)
                    if time.monotonic() > deadline:
                        raise ConnectError(self.host, f"no {held.ready!r} from the host within {timeout:.0f}s")
                    try:
                        seen += chan.recv(65536)
                    except TimeoutError:
                        continue
            held.output = seen.decode("utf-8", "replace")
        except BaseException:
            chan.close()
            raise

    @contextmanager
    def follow(self, command: str) -> Iterator[Followed]:
        """Run ``command`` on its own session channel of the kept connection, its output read line by line
        (bounded: transport/channels.py ``Lines``); leaving the context closes the channel."""
        with translate_errors(self.host):
            chan = self._active().open_session(timeout=self.options.connect_timeout)
        try:
            with translate_errors(self.host):
                chan.exec_command(self._wrap(command))
            yield ChannelLines(chan, self.host)
        finally:
            chan.close()

    def http_get(self, host: str, port: int, path: str, *, timeout: float = 5.0) -> HttpResponse:
        """GET through a direct-tcpip channel; ``status=None`` while the port refuses connections, and when the
        answer is not complete within ``timeout`` (total: connect, request, head and body) or is larger than
        :data:`MAX_DOCUMENT_BYTES` (``error`` says which).

        ConnectionLost when the SSH connection itself is gone (the caller may reconnect)."""
        with translate_errors(self.host):
            transport = self._active()
        with self.http_stream(host, port, path, None, timeout=timeout, method="GET", max_body=MAX_DOCUMENT_BYTES) as s:
            response = s.response()
        if response.status is None:
            self._lost_if_dead(transport, None)
        return response

    def _lost_if_dead(self, transport: paramiko.Transport, exc: BaseException | None) -> None:
        if not transport.is_active():
            raise ConnectionLost(self.host, f"connection lost ({exc or 'during an HTTP request'})") from exc

    @contextmanager
    def http_stream(
        self,
        host: str,
        port: int,
        path: str,
        body: bytes | None,
        *,
        timeout: float = 600.0,
        method: str = "POST",
        max_body: int = MAX_STREAM_BYTES,
    ) -> Iterator[HttpStream]:
        """Send a request through a direct-tcpip channel and read the answer as it arrives; ``status`` is None
        while the port refuses connections. Arrival times are ``time.perf_counter()``. ``timeout`` is total:
        opening the channel, sending, and every read until the answer ends (a trickling peer is cut there);
        the body is capped at ``max_body`` bytes (``error`` says so)."""
        with translate_errors(self.host):
            transport = self._active()
        clock = time.perf_counter
        deadline = time.monotonic() + timeout
        where = f"{host}:{port}{path}"
        try:
            chan = transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
        except ChannelException as exc:
            yield HttpStream(lambda: b"", clock, clock(), error=f"{host}:{port}: {exc.text}")
            return
        except (EOFError, SSHException, OSError) as exc:
            self._lost_if_dead(transport, exc)
            yield HttpStream(lambda: b"", clock, clock(), error=f"{where}: {exc or 'no answer'}")
            return
        try:
            left = max(deadline - time.monotonic(), 0.001)
            request = request_bytes(method, host, port, path, body)
            errors = (SSHException, OSError, EOFError)
            stream = exchange(chan, request, where, total=left, max_body=max_body, errors=errors, clock=clock)
            if stream.status is None and not transport.is_active():
                self._lost_if_dead(transport, None)
            yield stream
        finally:
            chan.close()

    def http_post(self, host: str, port: int, path: str, body: bytes = b"", *, timeout: float = 30.0) -> HttpResponse:
        """POST through a direct-tcpip channel and read the whole answer (at most :data:`MAX_DOCUMENT_BYTES`)."""
        with self.http_stream(host, port, path, body, timeout=timeout, max_body=MAX_DOCUMENT_BYTES) as stream:
            data = stream.read()
        if stream.status is None or stream.error:
            return HttpResponse(status=stream.status, body=data, error=stream.error)
        return HttpResponse(status=stream.status, body=data)

    def close(self) -> None:
        with suppress(Exception):  # its error belongs to open(), which was never called
            self._join_ahead()  # a connection still being made is closed too, not left behind
        self._conn.close()
        self._opened = False
