"""The `remediate` command line: parse options, call the API, render, exit. The only place that imports click.

``app`` holds the group and ``main``; ``change`` (edit, oom, rollback) and ``read`` (status, diagnose, backups,
plan, bench) register their commands on it; ``options`` is what they share. Nothing below the faces loads
until a command runs (``--help`` and ``--version`` need only click).
"""

from __future__ import annotations

from remediate.cli import (  # noqa: F401 - each registers its commands on the group
    bench,
    diagnose,
    edit,
    oom,
    plan,
    rollback,
    status,
    watch,
)
from remediate.cli.app import cli, main

__all__ = ["cli", "main"]
