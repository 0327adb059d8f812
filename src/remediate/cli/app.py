"""The `remediate` command group and its entry point."""

from __future__ import annotations

import gc
import os

import click

from remediate import __version__
from remediate.cli.flags import safety_from_env
from remediate.cli.options import CONTEXT_SETTINGS, fail


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="remediate")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Remediate sglang OOM crashes on GPU hosts: safely, verifiably, idempotently.

    \b
    Examples:
      remediate edit /etc/systemd/system/sglang.service
      remediate oom gpu-01 --dry-run
      remediate oom gpu-01 --target-tokens 200000
      remediate oom all -i inventory.yaml --canary 1 --batch 25%
      remediate rollback gpu-01
    """
    # Every command of this group and of its subgroups (auto_envvar_prefix makes their variables
    # REMEDIATE_<COMMAND>_<OPTION>, REMEDIATE_<GROUP>_<COMMAND>_<OPTION>).
    commands = list(_command_paths(ctx.command))
    refused = any(k.startswith("REMEDIATE_") for k in os.environ) and safety_from_env(os.environ, commands)
    if refused:
        fail(refused)


def _command_paths(group: click.Command, prefix: str = "") -> list[str]:
    """``oom``, ``watch``, ``watch_run``, …: every command's name path below ``group``, as click's
    ``auto_envvar_prefix`` joins them."""
    paths: list[str] = []
    for name, command in (group.commands if isinstance(group, click.Group) else {}).items():
        path = f"{prefix}_{name}" if prefix else name
        paths.append(path)
        paths.extend(_command_paths(command, path))
    return paths


def main() -> None:
    """Console-script entry point."""
    try:
        cli(prog_name="remediate")
    finally:
        # The run is over (the report printed, every file written and closed, every transport closed): what
        # the run loaded need not go through the cycle collector again at interpreter exit. gc.freeze() moves
        # every object to the permanent generation, which "future collections" ignore
        # (https://docs.python.org/3/library/gc.html#gc.freeze): exit after paramiko, cryptography and our
        # modules took ~0.08 s here, ~0.015 s frozen (docs/internals/PERFORMANCE.md). Reference counting still frees;
        # atexit handlers and threads still running (a second Ctrl-C's hosts) run as before.
        gc.freeze()
