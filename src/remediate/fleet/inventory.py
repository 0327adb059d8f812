"""inventory.yaml → hosts, validated; also Ansible YAML inventories (``all: {hosts, children, vars}``).

Every validation error names the file, the line and the key. Hosts keep the order in which they
appear in the file: rollouts take them in that order.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remediate.errors import ConfigError

if TYPE_CHECKING:
    import yaml

HOST_KEYS = (
    "user",
    "port",
    "identity",
    "known_hosts",
    "sudo",
    "unit",
    "server_port",
    "mem_fraction_static",
    "chunked_prefill_size",
    "gpu_memory_utilization",  # vLLM units only (mem_fraction_static: every engine's fraction)
    "max_num_batched_tokens",  # vLLM units only
    "alloc_conf",
    "min_tokens",
    "target_tokens",
    "probe_tokens",
)
ROLLOUT_KEYS = ("canary", "batch", "max_failures", "forks")
_TYPES: dict[str, tuple[type, ...]] = {
    "user": (str,),
    "port": (int,),
    "identity": (str,),
    "known_hosts": (str,),
    "sudo": (bool,),
    "unit": (str,),
    "server_port": (int,),
    "mem_fraction_static": (float, int, str),
    "chunked_prefill_size": (int,),
    "gpu_memory_utilization": (float, int, str),
    "max_num_batched_tokens": (int,),
    "alloc_conf": (str,),
    "min_tokens": (int,),
    "target_tokens": (int,),
    "probe_tokens": (int,),
    "address": (str,),
}
_ANSIBLE_MAP = {
    "ansible_host": "address",
    "ansible_user": "user",
    "ansible_port": "port",
    "ansible_ssh_private_key_file": "identity",
    "ansible_become": "sudo",
}


@dataclass(frozen=True)
class HostEntry:
    """One host: its name, where to reach it, and its merged settings (defaults < host vars)."""

    name: str
    address: str
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """``[user@]address[:port]`` for the transport."""
        user = self.settings.get("user")
        port = self.settings.get("port")
        host = self.address
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return (f"{user}@" if user else "") + host + (f":{port}" if port else "")


def parse_target(target: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` (``[v6addr]:port`` too) → (user, host, port)."""
    user, _, rest = target.rpartition("@")
    port: int | None = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":"):
            port = _port(tail[1:], target)
    elif rest.count(":") == 1:
        host, _, text = rest.partition(":")
        port = _port(text, target)
    else:
        host = rest  # a name, an IPv4 address, or a bare IPv6 address
    if not host:
        raise ConfigError(f"target {target!r} has no host")
    return user or None, host, port


def _port(text: str, target: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(f"target {target!r}: {text!r} is not a TCP port")
    return int(text)


def adhoc_host(target: str, defaults: dict[str, Any] | None = None) -> HostEntry:
    """A host given on the command line rather than named in an inventory.

    The inventory's defaults apply to what to do (fraction, tokens, unit…), but how to connect comes
    from the target itself and ssh_config, so an alias keeps its ``User``/``Port``.
    """
    user, host, port = parse_target(target)
    settings = {k: v for k, v in (defaults or {}).items() if k not in ("user", "port")}
    if user:
        settings["user"] = user
    if port:
        settings["port"] = port
    return HostEntry(name=target, address=host, settings=settings)


@dataclass
class Inventory:
    path: str
    defaults: dict[str, Any] = field(default_factory=dict)
    hosts: dict[str, HostEntry] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    rollout: dict[str, Any] = field(default_factory=dict)
    raw_host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)

    def select(self, patterns: tuple[str, ...] | list[str]) -> list[HostEntry]:
        """Hosts named by names, groups, ``all``, globs (``gpu-*``) or plain addresses, inventory order."""
        if not patterns:
            patterns = ["all"]
        chosen: list[str] = []
        adhoc: list[HostEntry] = []
        for pattern in patterns:
            names = self._expand(pattern)
            if names is None:
                if any(ch in pattern for ch in "*?["):
                    raise ConfigError(f"pattern {pattern!r} matches no host or group", source=self.path)
                adhoc.append(adhoc_host(pattern, self.defaults))
                continue
            chosen.extend(n for n in names if n not in chosen)
        ordered = [self.hosts[n] for n in self.hosts if n in chosen]
        return ordered + adhoc

    def _expand(self, pattern: str, seen: frozenset[str] = frozenset()) -> list[str] | None:
        if pattern == "all":
            return list(self.hosts)
        if pattern in self.hosts:
            return [pattern]
        if pattern in self.groups:
            if pattern in seen:
                raise ConfigError(f"group {pattern!r} includes itself", source=self.path)
            out: list[str] = []
            for member in self.groups[pattern]:
                for name in self._expand(member, seen | {pattern}) or []:
                    if name not in out:
                        out.append(name)
            return out
        if any(ch in pattern for ch in "*?["):
            hosts = [n for n in self.hosts if fnmatch.fnmatchcase(n, pattern)]
            groups = [g for g in self.groups if fnmatch.fnmatchcase(g, pattern)]
            names = list(hosts)
            for g in groups:
                names += [n for n in self._expand(g, seen) or [] if n not in names]
            return names or None
        return None


@cache
def _line_loader() -> type[yaml.SafeLoader]:
    """A SafeLoader that remembers the line of every mapping key (yaml is imported when a file is read: a run
    on plain addresses never loads it)."""
    import yaml

    class LineLoader(yaml.SafeLoader):
        pass

    LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    return LineLoader


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping = _LineDict()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise ConfigError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = key_node.start_mark.line + 1
    mapping.line = node.start_mark.line + 1
    return mapping


class _LineDict(dict[Any, Any]):
    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[Any, int] = {}
        self.line = 0


def _line(mapping: Any, key: Any) -> str:
    if isinstance(mapping, _LineDict):
        return f"line {mapping.lines.get(key, mapping.line)}"
    return "line ?"


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory (ours or Ansible's YAML)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("inventory not found", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read inventory: {exc.strerror}", source=source) from None
    return parse_inventory(text, source)


def parse_inventory(text: str, source: str = "inventory.yaml") -> Inventory:
    import yaml

    try:
        data = yaml.load(text, Loader=_line_loader())  # noqa: S506 - a SafeLoader subclass
    except ConfigError as exc:
        raise ConfigError(exc.message, source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise ConfigError(f"{where}invalid YAML ({getattr(exc, 'problem', exc)})", source=source) from None
    if data is None:
        raise ConfigError("inventory is empty", source=source)
    if not isinstance(data, dict):
        raise ConfigError("line 1: an inventory is a mapping with hosts:", source=source)
    if "all" in data and "hosts" not in data:
        return _parse_ansible(data, source)
    return _parse_native(data, source)


def _check_value(where: Any, key: str, value: Any, source: str, context: str) -> Any:
    types = _TYPES.get(key)
    if types is None:
        allowed = ", ".join(HOST_KEYS)
        raise ConfigError(f"{_line(where, key)}: unknown key {key!r} in {context} (allowed: {allowed})", source=source)
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(f"{_line(where, key)}: {key} must be {types[0].__name__}, not a boolean", source=source)
    if not isinstance(value, types):
        raise ConfigError(
            f"{_line(where, key)}: {key} must be {types[0].__name__}, got {type(value).__name__} {value!r}",
            source=source,
        )
    return _check_range(where, key, value, source)


def _check_range(where: Any, key: str, value: Any, source: str) -> Any:
    if key in ("port", "server_port") and not 0 < int(value) < 65536:
        raise ConfigError(f"{_line(where, key)}: {key} {value} is not a TCP port", source=source)
    if key in ("mem_fraction_static", "gpu_memory_utilization"):
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not 0 < number < 1:
            raise ConfigError(f"{_line(where, key)}: {key} {value!r} must be in (0, 1)", source=source)
    if key == "chunked_prefill_size" and value != -1 and value < 1:
        raise ConfigError(f"{_line(where, key)}: chunked_prefill_size must be ≥ 1 or -1", source=source)
    if key in ("min_tokens", "target_tokens", "probe_tokens", "max_num_batched_tokens") and value < 1:
        raise ConfigError(f"{_line(where, key)}: {key} must be ≥ 1", source=source)
    return value


def _settings(mapping: Any, source: str, context: str, *, allow_address: bool) -> dict[str, Any]:
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise ConfigError(f"{context} must be a mapping", source=source)
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if key == "address" and not allow_address:
            raise ConfigError(f"{_line(mapping, key)}: address belongs under hosts:, not {context}", source=source)
        out[key] = _check_value(mapping, str(key), value, source, context)
    return out


def _parse_native(data: Any, source: str) -> Inventory:
    for key in data:
        if key not in ("defaults", "hosts", "groups", "rollout"):
            raise ConfigError(
                f"{_line(data, key)}: unknown top-level key {key!r} (allowed: defaults, hosts, groups, rollout)",
                source=source,
            )
    inv = Inventory(path=source)
    inv.defaults = _settings(data.get("defaults"), source, "defaults", allow_address=False)
    hosts = data.get("hosts")
    if not isinstance(hosts, dict) or not hosts:
        raise ConfigError(f"{_line(data, 'hosts')}: hosts: must map host names to settings", source=source)
    for name, spec in hosts.items():
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise ConfigError(f"{_line(hosts, name)}: host {name!r} must be a mapping", source=source)
        own = _settings(spec, source, f"host {name!r}", allow_address=True)
        inv.raw_host_vars[str(name)] = own
        address = str(own.pop("address", name))
        inv.hosts[str(name)] = HostEntry(name=str(name), address=address, settings={**inv.defaults, **own})
    groups = data.get("groups") or {}
    if not isinstance(groups, dict):
        raise ConfigError(f"{_line(data, 'groups')}: groups: must map names to lists", source=source)
    for gname, members in groups.items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigError(f"{_line(groups, gname)}: group {gname!r} must be a list of names", source=source)
        if gname in inv.hosts:
            raise ConfigError(f"{_line(groups, gname)}: group {gname!r} has the name of a host", source=source)
        inv.groups[str(gname)] = list(members)
    for gname, members in inv.groups.items():
        for member in members:
            if member not in inv.hosts and member not in inv.groups and member != "all":
                raise ConfigError(
                    f"{_line(groups, gname)}: group {gname!r} names {member!r}, which is no host or group",
                    source=source,
                )
    rollout = data.get("rollout") or {}
    if not isinstance(rollout, dict):
        raise ConfigError(f"{_line(data, 'rollout')}: rollout: must be a mapping", source=source)
    for key, value in rollout.items():
        if key not in ROLLOUT_KEYS:
            raise ConfigError(
                f"{_line(rollout, key)}: unknown rollout key {key!r} (allowed: {', '.join(ROLLOUT_KEYS)})",
                source=source,
            )
        inv.rollout[str(key)] = value
    return inv


def _parse_ansible(data: Any, source: str) -> Inventory:
    """Ansible's YAML inventory: ``all: {hosts:, children:, vars:}``, nested children as groups."""
    inv = Inventory(path=source)

    def convert(vars_: Any, context: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not isinstance(vars_, dict):
            return out
        for key, value in vars_.items():
            name = _ANSIBLE_MAP.get(str(key), str(key))
            if name in _TYPES:
                out[name] = _check_value(vars_, name, value, source, context)
        return out

    def walk(group: str, node: Any, inherited: dict[str, Any]) -> list[str]:
        if node is None:
            return []
        if not isinstance(node, dict):
            raise ConfigError(f"group {group!r} must be a mapping", source=source)
        vars_ = {**inherited, **convert(node.get("vars"), f"group {group!r} vars")}
        members: list[str] = []
        for name, hvars in (node.get("hosts") or {}).items():
            own = convert(hvars or {}, f"host {name!r}")
            address = str(own.pop("address", name))
            prev = inv.hosts.get(str(name))
            settings = {**(prev.settings if prev else {}), **vars_, **own}
            inv.hosts[str(name)] = HostEntry(name=str(name), address=address, settings=settings)
            members.append(str(name))
        for child, cnode in (node.get("children") or {}).items():
            walk(str(child), cnode, vars_)
            members.append(str(child))
        if group != "all":
            inv.groups[group] = members
        return members

    all_node = data["all"]
    inv.defaults = convert((all_node or {}).get("vars"), "all vars") if isinstance(all_node, dict) else {}
    walk("all", all_node, inv.defaults)
    if not inv.hosts:
        raise ConfigError("Ansible inventory has no hosts", source=source)
    return inv


def dump_inventory(inv: Inventory, names: list[str], *, overrides: dict[str, dict[str, Any]] | None = None) -> str:
    """An inventory in our schema holding only ``names`` (for retry files); ``overrides``: host vars set per
    host over its own (the failed units of a host that ran several)."""
    hosts: dict[str, Any] = {}
    for name in names:
        entry = inv.hosts.get(name)
        if entry is None:
            hosts[name] = {"address": name, **(overrides or {}).get(name, {})}
            continue
        spec: dict[str, Any] = {"address": entry.address}
        for key, value in entry.settings.items():
            if inv.defaults.get(key) != value:
                spec[key] = value
        spec.update((overrides or {}).get(name, {}))
        hosts[name] = spec
    document: dict[str, Any] = {}
    if inv.defaults:
        document["defaults"] = inv.defaults
    document["hosts"] = hosts
    if inv.rollout:
        document["rollout"] = inv.rollout
    import yaml

    return yaml.safe_dump(document, sort_keys=False)
