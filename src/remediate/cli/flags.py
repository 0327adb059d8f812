"""The command line's flags → the values the api takes, and the safety flags the environment may not set.

Light on purpose (no layer below is imported at load): the group's callback checks the environment before
any command runs, and ``--help`` must stay quick.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from remediate.errors import ConfigError

if TYPE_CHECKING:
    from remediate.api import SSHOptions

# Safety-relevant options are never taken from REMEDIATE_<COMMAND>_<OPTION>: a stray variable in a shell
# or a CI job must not silently turn off the rollback or the host-key check, nor answer prompts.
SAFETY_OPTIONS = ("no_rollback", "accept_new_host_key", "yes", "force", "all_instances", "allow_raise", "resume")


def safety_from_env(environ: Mapping[str, str], commands: Iterable[str]) -> str | None:
    """The refusal for a safety option set in the environment (``REMEDIATE_OOM_NO_ROLLBACK=1``), or None.

    ``commands`` are the group's command names (click's ``auto_envvar_prefix`` gives each
    ``REMEDIATE_<COMMAND>``), so a command added to the group is covered without a list to keep."""
    for command in commands:
        for option in SAFETY_OPTIONS:
            name = f"REMEDIATE_{command}_{option}".upper().replace("-", "_")
            if environ.get(name):
                flag = "--" + option.replace("_", "-")
                return f"{name} is set: safety options are never read from the environment; pass {flag}"
    return None


@dataclass(frozen=True)
class Connection:
    """The values of ``connection_options`` (cli/options.py) that say which hosts and how to reach them, as
    click passes them to a command."""

    targets: tuple[str, ...]
    inventory: str | None
    identity: str | None
    known_hosts: str | None
    accept_new_host_key: bool
    connect_timeout: float | None
    ssh_config: str | None
    sudo: bool
    local: bool

    def remote_only(self) -> tuple[tuple[str, bool], ...]:
        """Each option that says how to reach remote hosts, and whether it was given (refused with --local)."""
        return (
            ("-i/--inventory", bool(self.inventory)),
            ("--identity", bool(self.identity)),
            ("--known-hosts", bool(self.known_hosts)),
            ("--accept-new-host-key", self.accept_new_host_key),
            ("--connect-timeout", bool(self.connect_timeout)),
            ("--ssh-config", bool(self.ssh_config)),
            ("--sudo", self.sudo),
        )


def ssh_from_cli(given: Connection, connect_timeout: float | None = None) -> SSHOptions:
    """The connection options of a remote command's command line (``connect_timeout``: the one a deprecated
    ``--timeout`` gave, else ``--connect-timeout``, else 10 s)."""
    from remediate import api

    return api.SSHOptions(
        connect_timeout=connect_timeout or given.connect_timeout or 10.0,
        identity=given.identity,
        known_hosts=given.known_hosts,
        accept_new_host_key=given.accept_new_host_key,
        ssh_config=given.ssh_config,
        sudo=given.sudo,
    )


def pick_timeout(deprecated: float | None, given: float | None, name: str, default: float) -> tuple[float, str | None]:
    """``--<name>`` (``given``), or the deprecated ``--timeout`` it replaces (with a warning to print), or
    ``default``."""
    flag = "--" + name.replace("_", "-")
    if deprecated is not None:
        if given is not None:
            raise ConfigError(f"--timeout is the deprecated spelling of {flag}: give only {flag}")
        return float(deprecated), f"--timeout is deprecated here; use {flag}"
    return (float(given) if given is not None else default), None
