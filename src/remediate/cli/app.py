"""The `remediate` command group and its entry point."""

from __future__ import annotations

import os

import click

from remediate import __version__
from remediate.cli.options import CONTEXT_SETTINGS, fail, settings


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="remediate")
def cli() -> None:
    """Remediate sglang OOM crashes on GPU hosts: safely, verifiably, idempotently.

    \b
    Examples:
      remediate edit /etc/systemd/system/sglang.service
      remediate oom gpu-01 --dry-run
      remediate oom gpu-01 --target-tokens 200000
      remediate oom all -i inventory.yaml --canary 1 --batch 25%
      remediate rollback gpu-01
    """
    refused = any(k.startswith("REMEDIATE_") for k in os.environ) and settings.safety_from_env(os.environ)
    if refused:
        fail(refused)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="remediate")
