"""The `remediate` command group and its entry point."""

from __future__ import annotations

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
    # Every command of this group (auto_envvar_prefix makes its variables REMEDIATE_<COMMAND>_<OPTION>).
    commands = ctx.command.commands if isinstance(ctx.command, click.Group) else {}
    refused = any(k.startswith("REMEDIATE_") for k in os.environ) and safety_from_env(os.environ, commands)
    if refused:
        fail(refused)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="remediate")
