"""PURE: what the read-only probe printed — the unit's ``systemctl show`` properties, its files, the evidence.

Every probe is one shell script (``templates/probe.sh.j2``) run in one round trip; its output is framed with
``@@`` header lines so one parser can split it. Nothing here does I/O.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field

from remediate.errors import UnsafePathError

SHOW_PROPERTIES = (
    "FragmentPath",
    "DropInPaths",
    "ExecStart",
    "Environment",
    "EnvironmentFiles",
    "NeedDaemonReload",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "MainPID",
    "InvocationID",
    "User",  # the account the engine's package is listed as (templates/probe.sh.j2 @@dists)
)

# Sections the probe prints when asked for crash evidence (``diagnose``, the ``oom`` gate).
EVIDENCE_SECTIONS = ("journal", "gpus", "apps", "ps")
# Sections every probe prints: the engine's *.dist-info directories (core/engines/version.py parse_dist_version).
LISTED_SECTIONS = (*EVIDENCE_SECTIONS, "dists")


@dataclass(frozen=True)
class RemoteFile:
    """A file as read on the host in the probe round trip."""

    path: str
    exists: bool
    text: str = ""
    sha256: str = ""
    mode: str = ""
    uid: int = -1
    gid: int = -1
    size: int = 0
    mtime: float = 0.0
    unsafe: str = ""  # the locked read's directory check: why root must not write here, and what to do


@dataclass(frozen=True)
class ServiceState:
    """What `systemctl show` said about the unit."""

    unit: str
    properties: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str:
        return self.properties.get(name, "")

    @property
    def active_state(self) -> str:
        return self.get("ActiveState")

    @property
    def result(self) -> str:
        return self.get("Result")

    @property
    def n_restarts(self) -> int:
        value = self.get("NRestarts")
        return int(value) if value.isdigit() else 0

    @property
    def main_pid(self) -> int:
        value = self.get("MainPID")
        return int(value) if value.isdigit() else 0

    @property
    def invocation_id(self) -> str:
        return self.get("InvocationID")

    @property
    def needs_daemon_reload(self) -> bool:
        return self.get("NeedDaemonReload") == "yes"

    @property
    def fragment_path(self) -> str:
        return self.get("FragmentPath")

    @property
    def dropin_paths(self) -> tuple[str, ...]:
        return tuple(self.get("DropInPaths").split())

    @property
    def environment_files(self) -> tuple[tuple[str, bool], ...]:
        """(path, optional) pairs from ``EnvironmentFiles=/p (ignore_errors=yes)``."""
        found = re.findall(r"(\S+) \(ignore_errors=(yes|no)\)", self.get("EnvironmentFiles"))
        return tuple((path, flag == "yes") for path, flag in found)

    @property
    def exec_argvs(self) -> tuple[tuple[str, ...], ...]:
        return parse_exec_start(self.get("ExecStart"))


@dataclass(frozen=True)
class ProbeResult:
    """Everything one probe round trip learned."""

    candidates: tuple[str, ...]
    state: ServiceState | None
    files: dict[str, RemoteFile]
    has_systemd_analyze: bool
    now: float
    # evidence sections (``with_evidence``): journal, gpus, apps, ps lines; a header's words (``@@gpus absent``)
    sections: dict[str, tuple[str, ...]] = field(default_factory=dict)
    section_notes: dict[str, str] = field(default_factory=dict)
    unloaded_dropins: tuple[str, ...] = ()  # UNIT.d/*.conf on disk that the loaded unit does not list yet
    daemonless: str = ""  # a systemctl that is not systemd's (``@@daemonless``: its name), else empty
    config_paths: tuple[str, ...] = ()  # ``--config`` YAML files the unit's texts name (``@@configs``), read too

    @property
    def needs_daemon_reload(self) -> bool:
        """The unit on disk differs from the loaded one: NeedDaemonReload=yes, or a drop-in systemd has not
        loaded (a drop-in in a new UNIT.d directory leaves NeedDaemonReload=no until units are next loaded)."""
        return bool(self.unloaded_dropins) or (self.state is not None and self.state.needs_daemon_reload)


def daemonless_note(name: str) -> str:
    """What a daemonless systemctl (docker-systemctl-replacement's systemctl3.py) cannot give, said once."""
    return (
        f"systemctl here is {name}, not systemd: the unit's files were found on its own search path; it keeps "
        "no journal (no journal lines in the crash evidence or a failed wait) and shows no InvocationID, "
        "NRestarts or Result (the health wait judges ActiveState, MainPID and /health)"
    )


def parse_show(text: str) -> dict[str, str]:
    """Parse ``systemctl show -p …`` KEY=VALUE output (values may contain '=')."""
    props: dict[str, str] = {}
    for line in text.split("\n"):  # not splitlines(): a path may hold \x1c, \x85 …
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            props[key] = value
    return props


def parse_exec_start(value: str) -> tuple[tuple[str, ...], ...]:
    """The argv lists in systemd's ``{ path=… ; argv[]=… ; ignore_errors=… ; start_time=[…] ; pid=… }``
    rendering of ExecStart.

    systemd 252 prints the argv[] words as written, joined by single spaces: unquoted (a word holding a
    space cannot be told apart) and unexpanded (``$VAR``/``${VAR}`` stay; systemd expands them only when
    it spawns the process). Good for ``--host``/``--port`` words, not for the whole command line.
    """
    argvs: list[tuple[str, ...]] = []
    for match in re.finditer(r"argv\[\]=(.*?) ; ignore_errors=", value):
        argvs.append(tuple(_split_show_words(match.group(1))))
    return tuple(argvs)


def _split_show_words(text: str) -> list[str]:
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == " ":
            i += 1
            continue
        if text[i] == '"':
            i += 1
            buf: list[str] = []
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    buf.append({"n": "\n", "t": "\t"}.get(text[i + 1], text[i + 1]))
                    i += 2
                    continue
                buf.append(text[i])
                i += 1
            words.append("".join(buf))
            i += 1
        else:
            j = text.find(" ", i)
            j = n if j < 0 else j
            words.append(text[i:j])
            i = j
    return words


def dropin_order(loaded: tuple[str, ...], unloaded: tuple[str, ...]) -> list[str]:
    """The drop-ins systemd applies after the next daemon-reload: by file name across directories; for one
    name, the first directory of the search path wins (the loaded list is already in that order)."""
    chosen: dict[str, str] = {}
    for path in (*loaded, *unloaded):
        chosen.setdefault(path.rsplit("/", 1)[-1], path)
    return [chosen[name] for name in sorted(chosen)]


def parse_probe(text: str, unit: str | None) -> ProbeResult:
    """Split the framed output of ``templates/probe.sh.j2``."""
    candidates: tuple[str, ...] = ()
    show_lines: list[str] = []
    files: dict[str, RemoteFile] = {}
    has_analyze = False
    now = 0.0
    unloaded: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()
    daemonless = ""
    section = ""
    current: dict[str, str] = {}
    b64: list[str] = []
    sections: dict[str, list[str]] = {}
    notes: dict[str, str] = {}

    unsafe = ""

    def flush_file() -> None:
        nonlocal unsafe
        if not current:
            return
        path = current["path"]
        if current.get("exists") != "1":
            files[path] = RemoteFile(path=path, exists=False, unsafe=unsafe)
        else:
            raw = base64.b64decode("".join(b64))
            files[path] = RemoteFile(
                path=path,
                exists=True,
                text=raw.decode("utf-8", "surrogateescape"),
                sha256=current.get("sha256", ""),
                mode=current.get("mode", ""),
                uid=int(current.get("uid", "-1")),
                gid=int(current.get("gid", "-1")),
                size=int(current.get("size", "0")),
                mtime=float(current.get("mtime", "0")),
                unsafe=unsafe,
            )
        unsafe = ""

    for line in text.split("\n"):  # not splitlines(): a path may hold \x1c, \x85 …
        if line.startswith("@@"):
            if section == "file":
                flush_file()
                current = {}
                b64 = []
            head, _, rest = line[2:].partition(" ")
            section = head
            if head == "units":
                candidates = tuple(rest.split())
            elif head == "unit":
                unit = rest.strip() or unit
            elif head == "analyze":
                has_analyze = rest.strip() == "1"
            elif head == "now":
                now = float(rest or 0)
            elif head == "unloaded":
                unloaded = tuple(rest.split())
            elif head == "configs":
                configs = tuple(rest.split())
            elif head == "daemonless":
                daemonless = rest.strip() or "a systemctl without systemd"
            elif head == "file":
                current = parse_file_header(rest)
            elif head == "unsafe":
                unsafe = rest  # about the @@file that follows
            elif head in LISTED_SECTIONS:
                sections.setdefault(head, [])
                if rest.strip():
                    notes[head] = rest.strip()
            continue
        if section == "show":
            show_lines.append(line)
        elif section == "file":
            b64.append(line.strip())
        elif section in LISTED_SECTIONS:
            sections[section].append(line)
    if section == "file":
        flush_file()
    state = ServiceState(unit=unit, properties=parse_show("\n".join(show_lines))) if unit else None
    return ProbeResult(
        candidates=candidates,
        state=state,
        files=files,
        has_systemd_analyze=has_analyze,
        now=now,
        sections={k: tuple(v) for k, v in sections.items()},
        section_notes=notes,
        unloaded_dropins=unloaded,
        daemonless=daemonless,
        config_paths=configs,
    )


_HEADER_KEY = re.compile(r"(?:^| )(path|exists|sha256|mode|uid|gid|size|mtime)=")
_FIXED_KEY = re.compile(r"(exists|sha256|mode|uid|gid|size|mtime)=(\S*) ")


def refuse_unsafe(found: ProbeResult, paths: list[str], host: str) -> None:
    """Refuse to write a file whose directories another user can change (the probe's check);
    nothing has been written yet. templates/commit.sh.j2 checks again right before it writes."""
    for path in paths:
        remote = found.files.get(path)
        if remote is not None and remote.unsafe:
            raise UnsafePathError(f"refused, nothing written: {remote.unsafe}", source=host)


def parse_file_header(rest: str) -> dict[str, str]:
    """``exists=1 sha256=… size=3 path=/a b.service``: the fixed-format keys, then ``path=`` to the end of
    the line, so a path may hold spaces or look like a key. (An older order with ``path=`` first is read
    up to the next known key.)"""
    out: dict[str, str] = {}
    pos = 0
    while (match := _FIXED_KEY.match(rest, pos)) is not None:
        out[match.group(1)] = match.group(2)
        pos = match.end()
    if rest.startswith("path=", pos) and (pos or " exists=" not in rest):
        out["path"] = rest[pos + len("path=") :]
        return out
    matches = list(_HEADER_KEY.finditer(rest))
    for match, nxt in zip(matches, [*matches[1:], None], strict=True):
        out[match.group(1)] = rest[match.end() : nxt.start() if nxt is not None else len(rest)]
    return out
