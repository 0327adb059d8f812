"""What every command shares: the layers below loaded on first use, option groups, the error boundary, endings.

Exit codes: 0 ok, 1 a host failed / was rolled back / not attempted (or `edit --check` found changes), 2 bad
input (nothing touched), 3 unreachable or authentication/host-key failure only, 70 a bug (traceback printed).
"""

from __future__ import annotations

import functools
import importlib
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import click

from remediate.cli import flags
from remediate.cli.flags import Connection
from remediate.core.bounds import check_option
from remediate.errors import EXIT_BAD_INPUT, EXIT_BUG, ConfigError, RemediateError

if TYPE_CHECKING:
    from rich.console import Console

    from remediate import api
    from remediate.api import SSHOptions, TransportFactory
    from remediate.cli.render import bench as render_bench
    from remediate.cli.render import console as render_console
    from remediate.cli.render import diagnose as render_diagnose
    from remediate.cli.render import plan as render_plan
    from remediate.cli.render import results as render_results
    from remediate.models import HostResult
else:  # `--help`, `--version` and option parsing need none of these: each loads when a command first uses it

    class _OnFirstUse:
        def __init__(self, name: str) -> None:
            self._name = name

        def __getattr__(self, attr: str) -> Any:
            return getattr(importlib.import_module(self._name), attr)

    api = _OnFirstUse("remediate.api")  # the commands reach the layers below through the api only
    _RENDER = ("bench", "console", "diagnose", "plan", "results")  # cli/render/<feature>.py
    render_bench, render_console, render_diagnose, render_plan, render_results = (
        _OnFirstUse(f"remediate.cli.render.{n}") for n in _RENDER
    )

__all__ = [
    "Connection",
    "Where",
    "api",
    "render_bench",
    "render_console",
    "render_diagnose",
    "render_plan",
    "render_results",
]

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "REMEDIATE", "max_content_width": 100}


def ssh_options(given: Connection, connect_timeout: float | None = None) -> SSHOptions:
    return flags.ssh_from_cli(given, connect_timeout)  # the command line's connection options → SSHOptions


def stdout() -> Console:
    return render_console.stdout_console()


def stderr() -> Console:
    return render_console.stderr_console()


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    from remediate.core.unitfile.report import display_text

    click.echo(f"remediate: {display_text(message)}", err=True)
    sys.exit(code)


def checked(name: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback checking an option as the API and the Ansible modules do (core/bounds.py ``BOUNDS``):
    a bad value is the same one line, exit 2, before anything else runs."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return check_option(name, value, text=True)
        except ConfigError as exc:
            fail(str(exc))

    return callback


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """The CLI boundary: RemediateError → one line + its exit code; anything else is a bug (70)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except RemediateError as exc:
            fail(str(exc), exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception:  # noqa: BLE001 - the one place a bug is reported
            traceback.print_exc()
            click.echo("remediate: internal error (a bug); please report it with the traceback above", err=True)
            sys.exit(EXIT_BUG)

    return wrapper


def desired_options(fn: F) -> F:
    """The desired-state options shared by `edit`, `oom` and `plan`."""
    # fmt: off
    decorators = [
        # One option means "the fraction" for every engine: sglang's --mem-fraction-static, vLLM's
        # --gpu-memory-utilization (either spelling, on either engine's unit); the same for the prefill bound.
        click.option("--mem-fraction-static", "--gpu-memory-utilization", "mem_fraction_static", metavar="F",
                     help="Set the memory fraction to F (0 < F < 1): sglang --mem-fraction-static, "
                          "vLLM --gpu-memory-utilization."),
        click.option("--mem-fraction-step", metavar="S",
                     help="Without a fraction: lower the current one by S (default 0.01; vLLM unset: from 0.9), once."),
        click.option("--chunked-prefill-size", "--max-num-batched-tokens", "chunked_prefill_size", metavar="N",
                     help="The prefill bound (default 4096, kept if already smaller): sglang --chunked-prefill-size "
                          "(-1 disables chunking), vLLM --max-num-batched-tokens."),
        click.option("--alloc-conf", metavar="OPTS",
                     help="PYTORCH_CUDA_ALLOC_CONF options to ensure (default expandable_segments:True)."),
    ]
    # fmt: on
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def connection_options(fn: F) -> F:
    """Target syntax and connection options shared by every remote command."""
    # fmt: off
    decorators = [
        click.argument("targets", nargs=-1, metavar="[TARGET]..."),
        click.option("-i", "--inventory", type=click.Path(dir_okay=False),
                     help="Inventory file (default ./inventory.yaml if present)."),
        click.option("--identity", type=click.Path(dir_okay=False), help="SSH private key file."),
        click.option("--known-hosts", type=click.Path(dir_okay=False),
                     help="known_hosts file (default: ~/.ssh/known_hosts and the system's)."),
        click.option("--accept-new-host-key", is_flag=True, allow_from_autoenv=False,
                     help="Record unknown host keys (like ssh accept-new); changed keys are always refused."),
        click.option("--connect-timeout", callback=checked("connect_timeout"), metavar="SECONDS",
                     help="Seconds to connect to each host (default 10)."),
        click.option("--ssh-config", type=click.Path(dir_okay=False),
                     help="ssh_config file (default ~/.ssh/config); aliases and ProxyJump work."),
        click.option("--sudo", is_flag=True, help="Log in as a non-root user and run as root with `sudo -n`."),
        click.option("--local", is_flag=True,
                     help="This machine is the host (no SSH; run as root): no TARGET, no inventory or SSH option."),
        click.option(
            "--unit",
            help="The systemd unit, or a glob ('sglang@*', as `systemctl list-units` matches) or names joined "
            "by commas (default: every unit whose ExecStart runs sglang; `oom`: those whose latest run crashed; "
            "`bench`, `watch`, --journal: one unit).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout."),
    ]
    # fmt: on
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


@dataclass(frozen=True)
class Where:
    """The hosts a command works on: the api's ``targets``, ``inventory`` and (``--local``) ``transport_factory``."""

    targets: tuple[str, ...]
    inventory: str | None
    transport_factory: TransportFactory | None = None


def hosts(given: Connection) -> Where:
    """The hosts from the command line. ``--local`` with a TARGET or a remote host's option is bad input
    (exit 2, one line)."""
    if not given.local:
        return Where(tuple(given.targets), given.inventory)
    if given.targets:
        fail(f"--local works on this machine: give no TARGET (got {' '.join(given.targets)})")
    for flag, is_given in given.remote_only():
        if is_given:
            fail(f"--local works on this machine: not with {flag}, it is for remote hosts")
    targets, factory = api.local_host()
    return Where(targets, None, factory)


def forks_option(fn: F) -> F:
    """``--forks`` of the read-only commands: hosts read at once (default: the inventory's, else 10)."""
    return click.option(
        "--forks",
        callback=checked("forks"),
        metavar="N",
        default=None,
        help="Hosts read at once (default: the inventory's, else 10).",
    )(fn)


def fleet_options(fn: F) -> F:
    # fmt: off
    decorators = [
        click.option("--canary", type=int, default=None,
                     help="Hosts in the first batch; any failure there stops everything (default 1)."),
        click.option(
            "--batch", default=None, help="Batch sizes: N, N%, or a list like 1,10%,25% (Ansible serial semantics)."
        ),
        click.option("--forks", type=int, default=None, help="Hosts worked on at once (default 10)."),
        click.option(
            "--max-failures", default=None, help="Failures tolerated over the whole rollout: N or P% (default 0)."
        ),
        click.option("--pause-after-canary", is_flag=True, help="Ask before going on after the canary batch."),
        click.option("--yes", "-y", is_flag=True, allow_from_autoenv=False, help="Answer yes to prompts."),
    ]
    # fmt: on
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def timeout_options(*, wait: bool, lock: bool, alias: str) -> Callable[[F], F]:
    """``--wait-timeout`` (server), ``--lock-timeout`` (another run's lock); the old ``--timeout`` meant
    ``alias`` on this command and stays as a deprecated, hidden spelling of it."""

    def decorate(fn: F) -> F:
        if wait:
            fn = click.option("--wait-timeout", callback=checked("wait_timeout"), metavar="SECONDS",
                              help="Seconds to wait for the server to come back (default 900).")(fn)  # fmt: skip
        if lock:
            fn = click.option("--lock-timeout", callback=checked("lock_timeout"), metavar="SECONDS",
                              help="Seconds to wait for another run's lock on the unit (default 30).")(fn)  # fmt: skip
        return click.option("--timeout", callback=checked("timeout"), hidden=True, help=f"Deprecated: {alias}.")(fn)

    return decorate


# The crash evidence's nvidia-smi queries run under coreutils `timeout -k 2 N` (templates/probe.sh.j2); the
# read of the host itself is bounded at 60 s, so N stays well under it.
smi_timeout_option = click.option(
    "--smi-timeout", callback=checked("smi_timeout"), metavar="SECONDS",
    help="Seconds each nvidia-smi query may take (it hangs after an Xid error; default 10).",
)  # fmt: skip


def resolve_timeout(deprecated: float | None, given: float | None, name: str, default: float) -> float:
    """``--<name>`` or the deprecated ``--timeout`` (said on stderr), else ``default``."""
    value, warning = flags.pick_timeout(deprecated, given, name, default)
    if warning:
        click.echo(f"remediate: warning: {warning}", err=True)
    return value


def emit(
    results: Sequence[HostResult], *, as_json: bool, dry_run: bool = False, extra: dict[str, Any] | None = None
) -> int:
    if as_json:
        click.echo(render_console.dumps(render_console.results_document(results, **(extra or {}))))
    else:
        out = stdout()
        for result in results:
            render_results.host_report(out, result, dry_run=dry_run)
        if len(results) > 1:
            render_results.recap(out, results)
    return api.exit_code(results)


def exit_with_rollout(rollout: api.RolloutResult, *, as_json: bool, dry_run: bool) -> None:
    """A mutating command's end: each host's report (or the JSON document), the retry file, the exit code."""
    code = emit(rollout.results, as_json=as_json, dry_run=dry_run, extra=rollout.extra())
    if rollout.retry_file and not as_json:
        stderr().print(f"retry file: {rollout.retry_file}", highlight=False)
    if rollout.warnings and not as_json:  # the rollout's own (the retry file's): said once, not per host
        from remediate.core.unitfile.report import display_text

        for warning in rollout.warnings:
            stderr().print(f"warning: {display_text(warning)}", highlight=False, markup=False)
    sys.exit(code)


def exit_with_table(
    results: Sequence[HostResult], *, as_json: bool, table: Callable[[Console, Sequence[HostResult]], None]
) -> None:
    """A read-only command's end: one table (or the JSON document), the exit code."""
    if as_json:
        click.echo(render_console.dumps(render_console.results_document(results)))
    else:
        table(stdout(), results)
    sys.exit(api.exit_code(results))


def strategy(
    canary: int | None, batch: str | None, forks: int | None, max_failures: str | None, pause_after_canary: bool
) -> api.StrategyArgs:
    """``fleet_options``' values as the api's rollout strategy (None: not given)."""
    return api.StrategyArgs(canary, batch, forks, max_failures, pause_after_canary)


def confirm_prompt(
    pause_after_canary: bool, yes: bool, progress: render_results.LiveProgress
) -> Callable[[str], bool] | None:
    """--pause-after-canary asks on the terminal (the live display paused); --yes answers yes."""
    if not pause_after_canary or yes:
        return None

    def ask(text: str) -> bool:
        with progress.suspended():
            return click.confirm(text, default=False, err=True)

    return ask


def live_progress(as_json: bool) -> render_results.LiveProgress:
    return render_results.LiveProgress(stderr(), quiet=as_json)


def journal_options(fn: F) -> F:
    """``--journal FILE`` and ``--unit-file UNIT`` of `diagnose` and `plan`: a saved journal, no host."""
    fn = click.option("--unit-file", metavar="UNIT", help="With --journal: the local unit file whose settings to use.")(
        fn
    )
    return click.option(
        "--journal",
        metavar="FILE",
        help="A saved `journalctl -u UNIT` (short, short-iso, json, cat; - for stdin) instead of a host.",
    )(fn)


def from_journal(journal: str | None, unit_file: str | None, given: Connection, *, offline: bool = False) -> bool:
    """--journal given (then no TARGET, no --inventory, no --local); --unit-file without it is bad input."""
    if journal is not None and given.local:
        fail("--journal reads a saved journal: --local has no meaning with it")
    api.check_journal_flags(journal, unit_file, given.targets, given.inventory, offline=offline)
    return journal is not None
