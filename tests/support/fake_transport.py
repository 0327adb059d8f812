"""FakeTransport: a scripted, recording implementation of the Transport protocol for tests.

Commands are answered by rules: a regex searched in the command (and, for ``bash -s`` scripts, in
the script sent on stdin) with a queue of replies; the last reply repeats once the queue is drained.
``http_get`` answers from a scripted sequence per path (``None`` = connection refused), e.g.
refused, refused, 503, 200. Everything run or fetched is recorded, so tests assert on what was sent
(never ``mock.patch``). A command no rule matches raises :class:`UnscriptedCommandError`: a test
must say what the host answers.

The ``*_output`` helpers build what the remote side prints (``@@``-framed probe output,
``systemctl show`` state polls, systemd's ``ExecStart=`` rendering), so tests script hosts in terms
of units and files rather than of framing details. The hosts built from it (the incident's unit, found and
read by the probe, and its named variants) are in tests/support/hosts.py.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from remediate.errors import CommandError, ConnectionLost, TransportError
from remediate.models import CommandResult
from remediate.transport.base import HttpResponse, Retake
from remediate.transport.http1 import HttpStream
from remediate.transport.preconnect import Preconnect

Reply = CommandResult | str | int | Callable[[str, str | None], CommandResult]
HttpReply = HttpResponse | int | None | tuple[int, bytes | str]
# A streamed answer: (seconds after sending, body bytes) pieces with status 200, a bare status, None
# (refused), or a callable of the request body returning one of those.
Pieces = list[tuple[float, bytes]]
StreamReply = Pieces | int | None | Callable[[bytes], "Pieces | int | None"]


ENVIRON_SCRIPT = "# remediate: environ"  # templates/environ.sh.j2: the server's allocator variables
LISTENER_SCRIPT = "# remediate: listener"  # templates/listener.sh.j2: who holds the unit's port


def listener_output(
    *,
    main_pid: int = 4242,
    listen: str = "127.0.0.1:30000",
    inode: int = 777,
    ours: bool = True,
    who: str = "",
    state: dict[str, str | int] | None = None,
    environ: str = "",
) -> str:
    """templates/listener.sh.j2's answer: the unit holds the listening socket (``ours``) or another process.
    ``state``: the wait's state properties its one ``systemctl show`` also gave (ActiveState, …; none: an
    answer that lacks them); ``environ``: the server's environment read after the ``@@end`` (``@@main …``)."""
    held = f"socket:[{inode}]" if ours else "socket:[1]"
    users = who or f'users:(("python3",pid={main_pid if ours else 9999},fd=7))'
    return (
        f"@@show\nMainPID={main_pid}\nControlGroup=/system.slice/sglang.service\nExecStart=\n"
        + "".join(f"{k}={v}\n" for k, v in (state or {}).items())
        + f"@@listen\nLISTEN 0 2048 {listen} 0.0.0.0:* ino:{inode} sk:1 <->\n"
        f"@@sockets\n{held}\n@@who\nLISTEN 0 2048 {listen} 0.0.0.0:* {users}\n@@end\n{environ}"
    )


class UnscriptedCommandError(AssertionError):
    """The code under test ran a command the test did not script."""


@dataclass(frozen=True)
class Call:
    """One recorded ``run``."""

    command: str
    stdin: str | None
    timeout: float | None

    @property
    def text(self) -> str:
        """What rules match against: the command, then the script sent on stdin."""
        return self.command if self.stdin is None else f"{self.command}\n{self.stdin}"


@dataclass(frozen=True)
class HttpCall:
    """One recorded ``http_get``."""

    host: str
    port: int
    path: str
    method: str = "GET"
    body: bytes = b""


@dataclass
class _Rule:
    pattern: re.Pattern[str]
    replies: deque[Reply]
    hits: int = 0


@dataclass
class FakeTransport:
    """A host whose answers are scripted; implements :class:`remediate.transport.base.Transport`."""

    host: str = "gpu-01"
    calls: list[Call] = field(default_factory=list)
    http_calls: list[HttpCall] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    holding: int = 0
    opened: int = 0
    opened_ahead: int = 0
    closed: int = 0
    reconnects: int = 0
    reconnect_error: TransportError | None = None
    retakes: list[Retake] = field(default_factory=list)
    _open_holds: list[tuple[str, str, str, Callable[[str], Retake] | None]] = field(default_factory=list)
    open_error: TransportError | None = None
    _rules: list[_Rule] = field(default_factory=list)
    _http: dict[str, deque[HttpReply]] = field(default_factory=dict)
    _streams: dict[str, deque[StreamReply]] = field(default_factory=dict)
    followed: list[str] = field(default_factory=list)
    # what a followed command prints: one list of lines per lines() call; [] a silent call; then it ends
    follow_script: deque[list[bytes]] = field(default_factory=deque)

    # -- scripting ---------------------------------------------------------------------------

    def on(self, pattern: str, *replies: Reply) -> FakeTransport:
        """Answer commands matching ``pattern`` (regex, searched) with ``replies`` in order.

        A reply is a CommandResult, a str (stdout, exit 0), an int (exit code, no output), or a
        callable ``(command, stdin) -> CommandResult``. The last reply repeats. Earlier rules win.
        """
        if not replies:
            raise ValueError("on() needs at least one reply")
        self._rules.append(_Rule(re.compile(pattern, re.MULTILINE), deque(replies)))
        return self

    def http(self, path: str, *replies: HttpReply) -> FakeTransport:
        """Answer ``GET path`` with ``replies`` in order (``None`` refused, an int a status, …); the last repeats."""
        if not replies:
            raise ValueError("http() needs at least one reply")
        self._http[path] = deque(replies)
        return self

    def stream(self, path: str, *replies: StreamReply) -> FakeTransport:
        """Answer streamed requests to ``path`` with ``replies`` in order; the last repeats."""
        if not replies:
            raise ValueError("stream() needs at least one reply")
        self._streams[path] = deque(replies)
        return self

    # -- the Transport protocol ---------------------------------------------------------------

    def open(self) -> None:
        self.opened += 1
        if self.open_error is not None:
            raise self.open_error

    def open_ahead(self) -> None:
        """No background connect: :meth:`open` is where a scripted host connects (and fails)."""
        self.opened_ahead += 1

    def preconnected(self, pre: Preconnect) -> None:
        """A scripted host has no socket to adopt: the proposal is dropped, as the SSH transport drops one
        it cannot use."""
        pre.close()

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> CommandResult:
        call = Call(command, stdin, timeout)
        self.calls.append(call)
        for rule in self._rules:
            if rule.pattern.search(call.text):
                rule.hits += 1
                reply = rule.replies.popleft() if len(rule.replies) > 1 else rule.replies[0]
                return _as_result(reply, command, stdin)
        if stdin and stdin.startswith(ENVIRON_SCRIPT):
            # host/common/environ.py's read of the server's environment, unless a test scripts it
            # (``on("environ", …)``): "no main process", so the environment is not checked.
            return CommandResult(command, 0, "@@main 0\n", "")
        if command.startswith(LISTENER_SCRIPT):  # unscripted: the unit holds its port
            port = re.search(r"^port=(\d+)$", command, re.MULTILINE)
            return _as_result(listener_output(listen=f"0.0.0.0:{port[1] if port else 30000}"), command, stdin)
        raise UnscriptedCommandError(f"{self.host}: no scripted reply for {command!r} (stdin: {_head(stdin)!r})")

    @contextmanager
    def hold(
        self, command: str, *, ready: str, timeout: float, again: Callable[[str], Retake] | None = None
    ) -> Iterator[str]:
        """Held commands are recorded in ``held``; scripted ones (``on``) that do not print ``ready`` fail
        with CommandError, as a real command that exits early would. Unscripted ones are granted. A
        :meth:`reconnect` takes each open hold back (its ``again`` command, recorded in ``held`` too)."""
        self.held.append(command)
        text = self._hold_once(command, ready)
        entry = (command, ready, text, again)
        self._open_holds.append(entry)
        self.holding += 1
        try:
            yield text
        finally:
            self.holding -= 1
            self._open_holds.remove(entry)

    def _hold_once(self, command: str, ready: str, expect: str | None = None) -> str:
        for rule in self._rules:
            if rule.pattern.search(command):
                rule.hits += 1
                reply = rule.replies.popleft() if len(rule.replies) > 1 else rule.replies[0]
                result = _as_result(reply, command, None)
                lines = result.stdout.splitlines()
                if ready not in lines or (expect is not None and expect not in lines):
                    raise CommandError(self.host, "hold", result)
                return result.stdout
        return ""

    @contextmanager
    def follow(self, command: str) -> Iterator[_ScriptedLines]:
        """A followed command prints ``follow_script``'s pieces, one per ``lines()``, then ends."""
        self.followed.append(command)
        yield _ScriptedLines(self.host, self.follow_script)

    def http_get(self, host: str, port: int, path: str, *, timeout: float = 5.0) -> HttpResponse:
        self.http_calls.append(HttpCall(host, port, path))
        replies = self._http.get(path)
        if replies is None:
            return HttpResponse(status=404, body=b"not found")
        reply = replies.popleft() if len(replies) > 1 else replies[0]
        return _as_response(reply)

    def http_post(self, host: str, port: int, path: str, body: bytes = b"", *, timeout: float = 30.0) -> HttpResponse:
        self.http_calls.append(HttpCall(host, port, path, "POST", body))
        replies = self._http.get(path)
        if replies is None:
            return HttpResponse(status=404, body=b"not found")
        reply = replies.popleft() if len(replies) > 1 else replies[0]
        return _as_response(reply)

    @contextmanager
    def http_stream(
        self, host: str, port: int, path: str, body: bytes, *, timeout: float = 600.0, method: str = "POST"
    ) -> Iterator[HttpStream]:
        """A scripted stream on a fake clock: sent at 0.0, each piece at its scripted time."""
        self.http_calls.append(HttpCall(host, port, path, method, body))
        replies = self._streams.get(path)
        reply: StreamReply = 404 if replies is None else replies.popleft() if len(replies) > 1 else replies[0]
        if callable(reply):
            reply = reply(body)
        if reply is None:
            yield HttpStream(lambda: b"", lambda: 0.0, 0.0, error=f"{host}:{port}: connection refused")
            return
        pieces: Pieces = [] if isinstance(reply, int) else list(reply)
        status = reply if isinstance(reply, int) else 200
        head = (
            f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n" if isinstance(reply, int) else "HTTP/1.1 200 OK\r\n\r\n"
        )
        queue: deque[tuple[float, bytes]] = deque([(0.0, head.encode()), *pieces])
        now = [0.0]

        def recv() -> bytes:
            if not queue:
                return b""
            now[0], data = queue.popleft()
            return data

        yield HttpStream(recv, lambda: now[0], 0.0)

    def reconnect(self, within: float) -> None:
        self.reconnects += 1
        if self.reconnect_error is not None:
            raise self.reconnect_error
        for command, ready, first, again in list(self._open_holds):
            if again is None:
                self.held.append(command)
                self._hold_once(command, ready)
                continue
            retake = again(first)
            self.held.append(retake.command)
            self.retakes.append(retake)
            self._hold_once(retake.command, ready, retake.expect)

    def close(self) -> None:
        self.closed += 1

    # -- inspection ---------------------------------------------------------------------------

    def ran(self, pattern: str) -> list[Call]:
        """Recorded calls whose command (or stdin script) matches ``pattern``."""
        regex = re.compile(pattern, re.MULTILINE)
        return [call for call in self.calls if regex.search(call.text)]

    def scripts(self, marker: str) -> list[str]:
        """The stdin scripts that contain ``marker`` (e.g. ``"# remediate commit"``), in order."""
        return [call.stdin for call in self.calls if call.stdin is not None and marker in call.stdin]

    def fetched(self, path: str) -> list[HttpCall]:
        return [call for call in self.http_calls if call.path == path]


@dataclass
class _ScriptedLines:
    host: str
    script: deque[list[bytes]]

    def lines(self, timeout: float) -> list[bytes]:
        if not self.script:
            raise ConnectionLost(self.host, "the followed command ended")
        return self.script.popleft()


def _head(text: str | None) -> str | None:
    return None if text is None else text.splitlines()[0] if text else ""


def _as_result(reply: Reply, command: str, stdin: str | None) -> CommandResult:
    if isinstance(reply, CommandResult):
        return reply
    if isinstance(reply, str):
        return CommandResult(argv=command, exited=0, stdout=reply, stderr="")
    if isinstance(reply, int):
        return CommandResult(argv=command, exited=reply, stdout="", stderr="")
    return reply(command, stdin)


def _as_response(reply: HttpReply) -> HttpResponse:
    if reply is None:
        return HttpResponse(status=None, body=b"", error="connection refused")
    if isinstance(reply, HttpResponse):
        return reply
    if isinstance(reply, int):
        return HttpResponse(status=reply, body=b"")
    status, body = reply
    return HttpResponse(status=status, body=body.encode() if isinstance(body, str) else body)


# -- what the remote side prints ---------------------------------------------------------------


def exec_start_value(*argvs: Sequence[str]) -> str:
    """systemd's ``systemctl show -p ExecStart`` rendering of one or more argv lists."""

    def word(w: str) -> str:
        if w and not re.search(r'[\s"\\]', w):
            return w
        escaped = w.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        return f'"{escaped}"'

    return " ".join(
        f"{{ path={argv[0]} ; argv[]={' '.join(word(w) for w in argv)} ; ignore_errors=no ; "
        "start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
        for argv in argvs
    )


def show_output(properties: Mapping[str, str | int]) -> str:
    """``systemctl show -p …`` output: one KEY=VALUE line per property."""
    return "".join(f"{key}={value}\n" for key, value in properties.items())


def probe_output(
    unit: str | None,
    properties: Mapping[str, str | int],
    files: Mapping[str, str | bytes | None] = {},  # noqa: B006 - read-only default
    *,
    candidates: Iterable[str] | None = None,
    analyze: bool = False,
    now: float = 1_700_000_000.0,
    mode: str = "644",
    locked: bool = True,
) -> str:
    """The ``@@``-framed stdout of ``templates/probe.sh.j2``; a file of ``None`` is absent. ``locked``: the
    locked read's ``@@locked`` line (printed once it holds the unit's lock, for a unit found)."""
    lines = [f"@@now {now}", f"@@analyze {1 if analyze else 0}"]
    if candidates is not None:
        lines.append("@@units" + "".join(f" {c}" for c in candidates))
    if unit is not None:
        lines += ["@@locked"] if locked else []
        lines += [f"@@unit {unit}", "@@show"]
        lines += show_output(properties).splitlines()
    for path, content in files.items():
        if content is None:
            lines.append(f"@@file exists=0 path={path}")
            continue
        raw = content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content
        digest = hashlib.sha256(raw).hexdigest()
        lines.append(f"@@file exists=1 sha256={digest} mode={mode} uid=0 gid=0 size={len(raw)} path={path}")
        encoded = base64.b64encode(raw).decode("ascii")
        lines += [encoded[i : i + 76] for i in range(0, len(encoded), 76)]
    lines.append("@@end")
    return "\n".join(lines) + "\n"


def state_output(
    active: str = "active",
    sub: str = "running",
    *,
    result: str = "success",
    n_restarts: int = 0,
    main_pid: int = 4242,
    invocation_id: str = "inv-1",
    journal: str = "",
) -> str:
    """One wait poll: ``systemctl show -p ActiveState,…`` then ``@@journal`` and the newest journal line."""
    props: dict[str, str | int] = {
        "ActiveState": active,
        "SubState": sub,
        "Result": result,
        "NRestarts": n_restarts,
        "MainPID": main_pid,
        "InvocationID": invocation_id,
    }
    return show_output(props) + "@@journal\n" + (journal + "\n" if journal else "")


# -- the incident's host -----------------------------------------------------------------------
