"""PURE: where a containerised server is reached from its host — the ``-p``/``--publish`` mapping of its port.

A container on docker's or podman's default (bridge) network is reachable from the host only through a
published port: ``-p [IP:][HOST_PORT:]CONTAINER_PORT[/PROTO]`` (docker's ``nat.ParsePortSpec`` in
go-connections/nat/nat.go; ranges ``8000-8001:30000-30001``; an IPv6 address in brackets). With
``--network host`` the container's port is the host's. Anything else cannot be reached from the host, so a
health wait there would only time out and roll back a healthy change.
"""

from __future__ import annotations

import re

from remediate.core.unitfile.command import ContainerPorts
from remediate.errors import ConfigError

_PORTS = re.compile(r"\d+(?:-\d+)?")
_ANY = ("", "0.0.0.0", "::")


def _range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def parse_publish(spec: str) -> tuple[str, str, str, str] | None:
    """``[IP:][HOST_PORT:]CONTAINER_PORT[/PROTO]`` → (ip, host ports, container ports, proto), else None."""
    rest, _, proto = spec.partition("/")
    ip = ""
    if rest.startswith("["):  # [::1]:8000:30000
        ip, bracket, rest = rest[1:].partition("]:")
        if not bracket:
            return None
        parts = ["", *rest.split(":")] if rest.count(":") == 1 else []
    else:
        parts = rest.split(":")
        if len(parts) == 3:
            ip = parts[0]
    if len(parts) == 1:
        parts = ["", "", parts[0]]
    elif len(parts) == 2:
        parts = ["", *parts]
    if len(parts) != 3 or not _PORTS.fullmatch(parts[2]) or (parts[1] and not _PORTS.fullmatch(parts[1])):
        return None
    if proto not in ("", "tcp", "udp", "sctp"):
        return None
    return ip, parts[1], parts[2], proto or "tcp"


def host_endpoint(ports: ContainerPorts, server_host: str, port: int) -> tuple[str, int]:
    """(address, port) on the host for the server listening on ``port`` inside the container, or a
    ConfigError naming the option to add where the host cannot reach it."""
    kind = ports.tool
    if ports.network in ("host", "ns:host") or (ports.network or "").startswith("host:"):
        return server_host, port
    for spec in reversed(ports.publish):  # the last mapping of a port wins, as docker's map does
        parsed = parse_publish(spec)
        if parsed is None:
            raise ConfigError(f"`{kind} run -p {spec}` is not a port mapping remediate can read")
        ip, host_ports, container_ports, proto = parsed
        low, high = _range(container_ports)
        if proto != "tcp" or not low <= port <= high:
            continue
        if not host_ports:
            raise ConfigError(
                f"`{kind} run -p {spec}` publishes the server's port {port} on a host port {kind} picks at start: "
                f"give it one (-p {port}:{port}) so the health wait knows where to look"
            )
        host_low, _ = _range(host_ports)
        return ("127.0.0.1" if ip in _ANY else ip), host_low + (port - low)
    if ports.publish_all:
        raise ConfigError(
            f"`{kind} run -P` publishes the server's port {port} on a host port {kind} picks at start: "
            f"publish it with -p HOST_PORT:{port} so the health wait knows where to look"
        )
    network = f" (--network {ports.network})" if ports.network else ""
    raise ConfigError(
        f"the server's port {port} in the container is not published{network}: it is not reachable from the host "
        f"and the health wait cannot work; add `-p {port}:{port}` or `--network host` to `{kind} run`"
    )
