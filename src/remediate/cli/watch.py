"""`remediate watch`: the remediation agent (the loop), and its switches: status, approve, deny, pause, resume.

``remediate watch TARGET…`` runs the loop (the group's default command, `run`); a host named like a
subcommand is reached as ``remediate watch run NAME``.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import sys
import threading
from typing import Any

import click

from remediate.cli.app import cli
from remediate.cli.options import (
    Connection,
    checked,
    connection_options,
    handle_errors,
    resolve_timeout,
    ssh_options,
)
from remediate.errors import EXIT_BAD_INPUT

_SUBCOMMANDS = ("run", "status", "approve", "deny", "pause", "resume")


class _DefaultRun(click.Group):
    """A group whose first word, when it is not a subcommand, is a target of `run`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in _SUBCOMMANDS and args[0] not in ("--help", "-h")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@cli.group(cls=_DefaultRun)
def watch() -> None:
    """Watch hosts, diagnose each OOM crash and fix it under the rails (cooldown, cap, breaker, approval).

    \b
    Examples:
      remediate watch all -i inventory.yaml --interval 15s
      remediate watch all -i inventory.yaml --once --dry-run
      remediate watch status --json
      remediate watch approve 3f2a9c1e
    """


def _seconds(value: str | None, flag: str) -> float | None:
    from remediate.core.watch.policy import parse_duration

    return None if value is None else parse_duration(value, flag)


state_dir_option = click.option("--state-dir", type=click.Path(file_okay=False), help="The watcher's state directory.")


@watch.command("run")
@connection_options
@click.option("--interval", default="15s", show_default=True, help="Time between polls (jittered ±20%).")
@click.option("--policy", type=click.Path(dir_okay=False), help="The policy file (YAML; docs/WATCH.md).")
@click.option("--dry-run", is_flag=True, help="Decide and log, never act.")
@click.option("--once", is_flag=True, help="One poll round, then exit (cron, a systemd timer).")
@click.option("--lookback", help="Without a saved cursor: how far back to read (default: the policy's, 1h).")
@click.option("--healthy-period", help="Healthy this long starts a new incident count (default: the policy's, 6h).")
@click.option("--wait-timeout", callback=checked("wait_timeout"), metavar="SECONDS", default=900.0, show_default=True,
              help="Seconds a fix may wait for the server to be healthy.")  # fmt: skip
@click.option(
    "--webhook", metavar="URL", help="POST decisions, outcomes and the breaker here (JSON with Slack's text)."
)
@click.option("--metrics-listen", metavar="HOST:PORT", help="Serve Prometheus /metrics here (e.g. 127.0.0.1:9464).")
@click.option("--no-follow", is_flag=True, help="Poll only: do not follow each host's journal.")
@click.option("--resume", is_flag=True, allow_from_autoenv=False, help="Re-arm a tripped breaker before watching.")
@state_dir_option
@handle_errors
def run(
    targets: tuple[str, ...],
    inventory: str | None,
    identity: str | None,
    known_hosts: str | None,
    accept_new_host_key: bool,
    connect_timeout: float | None,
    ssh_config: str | None,
    sudo: bool,
    local: bool,
    unit: str | None,
    as_json: bool,
    interval: str,
    policy: str | None,
    dry_run: bool,
    once: bool,
    lookback: str | None,
    healthy_period: str | None,
    wait_timeout: float,
    webhook: str | None,
    metrics_listen: str | None,
    no_follow: bool,
    resume: bool,
    state_dir: str | None,
) -> None:
    """Run the watcher (the default subcommand).

    \b
    Example:
      remediate watch all -i inventory.yaml --policy watch-policy.yaml --interval 15s
    """
    from remediate.api import watch as api_watch
    from remediate.api.watch import sd_notify

    # --local and --json come with the shared connection options; the watcher does not use them.
    given = Connection(targets, inventory, identity, known_hosts, accept_new_host_key, connect_timeout, ssh_config,
                       sudo, local)  # fmt: skip
    request = api_watch.WatchRequest(
        targets=tuple(targets),
        inventory=inventory,
        ssh=ssh_options(given, resolve_timeout(None, connect_timeout, "connect_timeout", 10.0)),
        unit=unit,
        policy=policy,
        interval_s=_seconds(interval, "--interval") or 15.0,
        lookback_s=_seconds(lookback, "--lookback"),
        healthy_period_s=_seconds(healthy_period, "--healthy-period"),
        dry_run=dry_run,
        once=once,
        state_dir=state_dir,
        wait_timeout=wait_timeout,
        webhook=webhook,
        metrics_listen=metrics_listen,
        follow=not no_follow,
    )
    if resume:
        api_watch.set_breaker(None, state_dir)
    stop = threading.Event()
    # SIGTERM: an in-flight fix finishes (bounded by --wait-timeout), no new one starts.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def pause_between(seconds: float) -> None:
        stop.wait(seconds)  # SIGTERM cuts the pause short

    def ready() -> None:
        sd_notify("READY=1")  # the state claimed and the policy valid: before any host is read

    try:
        api_watch.watch(request, should_stop=stop.is_set, sleep=pause_between, on_ready=ready, warn=_warn,
                        on_event=_print_event)  # fmt: skip
    finally:
        sd_notify("STOPPING=1")


def _warn(line: str) -> None:
    click.echo(f"remediate: watch: {line}", err=True)


def _print_event(event: dict[str, Any]) -> None:
    """One line per event on stdout (a terminal; the journal under systemd), flushed at once; nothing while
    every host is healthy."""
    from remediate.cli.render.watch import event_line

    line = event_line(event)
    if line is not None:
        click.echo(line)
        sys.stdout.flush()


def approver() -> str:
    """Who answers an approval: the person behind sudo (``SUDO_USER``, believed only when this process is
    root, as sudo sets it), else the account of the real uid — never ``$LOGNAME``/``$USER``, which anyone sets."""
    sudo_user = os.environ.get("SUDO_USER")
    if sudo_user and os.geteuid() == 0:
        return sudo_user
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no passwd entry (a container): the number is who it is
        return f"uid {os.getuid()}"


@watch.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("--policy", type=click.Path(dir_okay=False), help="The watcher's policy file (its cooldown and cap).")
@state_dir_option
@handle_errors
def status(as_json: bool, policy: str | None, state_dir: str | None) -> None:
    """Every watched host (its state, last crash, last fix, next fix allowed), the breaker, open incidents
    and pending approvals.

    \b
    Example:
      remediate watch status --policy watch-policy.yaml
    """
    from remediate.api.watch import watch_status

    doc = watch_status(state_dir, policy=policy)
    for problem in doc.get("problems", []):  # what could not be read, one line each; the rest is shown
        click.echo(f"remediate: warning: {problem}", err=True)
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))
    else:
        from remediate.cli.render.watch import status_lines

        for line in status_lines(doc):
            click.echo(line)
    if doc["paused"] is None:
        sys.exit(EXIT_BAD_INPUT)


@watch.command("approve")
@click.argument("approval_id")
@state_dir_option
@handle_errors
def approve(approval_id: str, state_dir: str | None) -> None:
    """Let a pending fix go ahead.

    \b
    Example:
      remediate watch approve 3f2a9c1e
    """
    from remediate.api.watch import answer

    answer(approval_id, approve=True, who=approver(), directory=state_dir)


@watch.command("deny")
@click.argument("approval_id")
@state_dir_option
@handle_errors
def deny(approval_id: str, state_dir: str | None) -> None:
    """Drop a pending fix.

    \b
    Example:
      remediate watch deny 3f2a9c1e
    """
    from remediate.api.watch import answer

    answer(approval_id, approve=False, who=approver(), directory=state_dir)


@watch.command("pause")
@state_dir_option
@handle_errors
def pause(state_dir: str | None) -> None:
    """Stop automatic fixes (crashes are still reported) until `resume`.

    \b
    Example:
      remediate watch pause
    """
    from remediate.api.watch import set_paused

    set_paused(True, state_dir)


@watch.command("resume")
@state_dir_option
@handle_errors
def resume(state_dir: str | None) -> None:
    """Lift a pause and re-arm a tripped breaker.

    \b
    Example:
      remediate watch resume
    """
    from remediate.api.watch import set_breaker, set_paused

    set_paused(False, state_dir)
    set_breaker(None, state_dir)
