"""The command line's flags → the values the api takes, and the safety flags the environment may not set.

Light on purpose (no layer below is imported at load): the group's callback checks the environment before
any command runs, and ``--help`` must stay quick.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

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


def strategy_from_cli(kw: Mapping[str, Any]) -> dict[str, Any]:
    """The rollout flags given: ``--canary``, ``--batch``, ``--forks``, ``--max-failures``, ``--pause-after-canary``."""
    return {
        key: kw.get(key)
        for key in ("canary", "batch", "forks", "max_failures", "pause_after_canary")
        if kw.get(key) not in (None, False)
    }


def ssh_from_cli(kw: Mapping[str, Any], connect_timeout: float | None = None) -> SSHOptions:
    """The connection options of a remote command's command line (``--connect-timeout`` or ``connect_timeout``)."""
    from remediate import api

    return api.SSHOptions(
        connect_timeout=connect_timeout or kw.get("connect_timeout") or 10.0,
        identity=kw.get("identity"),
        known_hosts=kw.get("known_hosts"),
        accept_new_host_key=bool(kw.get("accept_new_host_key")),
        ssh_config=kw.get("ssh_config"),
        sudo=bool(kw.get("sudo")),
    )


def pick_timeout(raw: Mapping[str, Any], name: str, default: float) -> tuple[float, str | None]:
    """``--<name>``, or the deprecated ``--timeout`` it replaces (with a warning to print), or ``default``."""
    flag = "--" + name.replace("_", "-")
    if raw.get("timeout") is not None:
        if raw.get(name) is not None:
            raise ConfigError(f"--timeout is the deprecated spelling of {flag}: give only {flag}")
        return float(raw["timeout"]), f"--timeout is deprecated here; use {flag}"
    return (float(raw[name]) if raw.get(name) is not None else default), None
