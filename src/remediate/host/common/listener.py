"""Is the server on the unit's port ours? One read-only round trip (``templates/listener.sh.j2``).

After a restart, ``/health`` 200 proves only that *something* on the port answers: any process that bound
the port first (a stale server, another user's process) answers as well. The wait takes the answer for the
new server only when the listening socket is held by the unit's processes (its cgroup, MainPID and its
descendants): :func:`remediate.core.listener.judge_owner`.

The same round trip is the health wait's last look (:func:`last_look`): its one ``systemctl show`` also gives
the unit's state (judged as every state read of the wait is), and, when asked, the server's allocator
variables are read beside it (host/common/environ.py's read, from the same MainPID).

Limits: a container launcher (docker, podman, nerdctl in ExecStart) runs the server in the runtime's own
cgroup, under containerd/conmon, and publishes the port through docker-proxy or the runtime's netns: its
processes are not the unit's, so the check cannot prove ownership there and is skipped (``is_ours`` with
the reason). A host where ``ss`` (iproute2) is missing or fails cannot be checked either; the answer is
then accepted, and the reason says so.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from remediate.core.listener import Listener, Owner, parse_listeners, parse_socket_inodes, who
from remediate.core.probe import ServiceState, parse_show
from remediate.host.common import templates
from remediate.host.common.environ import ServerEnv, environ_args, parse_environ
from remediate.transport.base import Transport

COMMAND_TIMEOUT_S = 30.0
_CONTAINER_TOOLS = frozenset({"docker", "podman", "nerdctl"})
_WILDCARDS = frozenset({"*", "0.0.0.0", "::"})


def reached(listeners: Sequence[Listener], host: str) -> tuple[Listener, ...]:
    """The listeners a connection to ``host`` reaches: a socket bound to that address wins over a wildcard one
    (Linux: ``__inet_lookup_listener`` scores an exact match above INADDR_ANY); a name, not an address, may
    reach any of them."""
    try:
        wanted = str(ipaddress.ip_address(host))
    except ValueError:
        return tuple(listeners)
    exact = tuple(x for x in listeners if _canonical(x.address) == wanted)
    if exact:
        return exact
    wild = tuple(x for x in listeners if x.address in _WILDCARDS)
    return wild or tuple(listeners)


def _canonical(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def judge_owner(
    listeners: Sequence[Listener], ours: frozenset[int], endpoint: tuple[str, int], unit: str, users: str
) -> Owner:
    """Ours only when the port has a listener for the endpoint and each one it may reach is held by the unit."""
    host, port = endpoint
    serving = reached([x for x in listeners if x.port == port], host)
    if not serving:
        return Owner(False, f"nothing listens on port {port} any more")
    strangers = [x for x in serving if x.inode not in ours]
    if strangers:
        where = f"{strangers[0].address}:{strangers[0].port}"
        return Owner(False, f"{where} is held by a process outside {unit} ({users}): not our server")
    return Owner(True, f"{unit} holds {serving[0].address}:{serving[0].port}")


# ExecStart (is it a container?) and ControlGroup (whose sockets) for the check; the rest, the wait's state props
_SHOW = "MainPID,ControlGroup,ExecStart,ActiveState,SubState,Result,NRestarts,InvocationID"


def listener_script(unit: str, port: int, *, environ: bool = False, entry: str | None = None) -> str:
    """``entry``: the server process's argv word for the environ read (its Engine's ``process_entry``)."""
    args = (environ_args(entry) if entry else environ_args()) if environ else {}
    return templates.render("listener.sh.j2", unit=unit, port=port, properties=_SHOW, environ=environ, **args)


def _launches_container(state: ServiceState) -> bool:
    """docker/podman/nerdctl anywhere in ExecStart's words, also inside ``bash -c "exec docker run …"``."""
    words = (w for argv in state.exec_argvs for text in argv for w in re.split(r"[\s'\";&|()]+", text))
    return any(w.rsplit("/", 1)[-1] in _CONTAINER_TOOLS for w in words)


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith("@@"):
            current = sections.setdefault(line[2:].split(" ", 1)[0], [])
            continue
        if current is not None:
            current.append(line)
    return sections


def _check_part(text: str) -> tuple[str, str]:
    """The check's own output (up to its first ``@@end`` line, included) and what follows it (the environ)."""
    head, sep, tail = text.partition("\n@@end\n")
    return (head + sep, tail) if sep else (text, "")


def parse_owner(text: str, unit: str, endpoint: tuple[str, int]) -> Owner:
    """The verdict from the script's output (``@@show``, ``@@listen``, ``@@sockets``, ``@@who``, ``@@end``)."""
    sections = _sections(_check_part(text)[0])
    if "end" not in sections:
        return Owner(False, "the check of who holds the port did not finish")
    state = ServiceState(unit=unit, properties=parse_show("\n".join(sections.get("show", []))))
    if _launches_container(state):
        return Owner(True, f"{unit} runs a container: the port's owner is the container runtime's, not checked")
    if "nosockets" in sections:
        return Owner(True, "ss (iproute2) is missing or failed on the host: the port's owner is not checked")
    if state.main_pid <= 0:
        return Owner(False, f"{unit} has no main process")
    listeners = parse_listeners(sections.get("listen", []))
    ours = parse_socket_inodes(sections.get("sockets", []))
    return judge_owner(listeners, ours, endpoint, unit, who(sections.get("who", [])))


def listener_owner(transport: Transport, unit: str, endpoint: tuple[str, int]) -> Owner:
    """Whether the socket that ``endpoint`` reaches is held by ``unit``'s processes (read on the host)."""
    return last_look(transport, unit, endpoint).owner


@dataclass(frozen=True)
class Look:
    """The health wait's last look at a server that answers: who holds the port, the unit's state (None: the
    look did not finish), and the server's allocator variables (``environ``: asked for and read)."""

    owner: Owner
    state: ServiceState | None
    environ: bool = False
    env: ServerEnv | None = None


def parse_look(text: str, unit: str, endpoint: tuple[str, int], *, environ: bool = False) -> Look:
    check, rest = _check_part(text)
    owner = parse_owner(check, unit, endpoint)
    sections = _sections(check)
    state = None
    if "end" in sections:
        props = parse_show("\n".join(sections.get("show", [])))
        state = ServiceState(unit=unit, properties=props) if props.get("ActiveState") else None
    env = parse_environ(rest) if environ else None
    return Look(owner, state, environ and "@@main " in rest, env)


def last_look(
    transport: Transport, unit: str, endpoint: tuple[str, int], *, environ: bool = False, entry: str | None = None
) -> Look:
    """One round trip: who holds the port ``endpoint`` reaches, the unit's state, and (``environ``) the
    server's allocator variables (of the process whose argv word matches ``entry``; sglang's by default)."""
    script = listener_script(unit, endpoint[1], environ=environ, entry=entry)
    result = transport.run(script, timeout=COMMAND_TIMEOUT_S)
    return parse_look(result.stdout, unit, endpoint, environ=environ)
