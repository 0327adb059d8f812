"""The `remediate` command line: parse options, call the orchestration layer, render, exit.

The only module that imports click. Exit codes: 0 ok, 1 a host failed / was rolled back / not
attempted (or `edit --check` found changes), 2 bad input (nothing touched), 3 unreachable or
authentication/host-key failure only, 70 a bug (traceback printed).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from remediate import __version__
from remediate.errors import EXIT_BAD_INPUT, EXIT_BUG, RemediateError

if TYPE_CHECKING:
    from rich.console import Console

    from remediate import api, render, render_bench
    from remediate.fleet import settings, sweep
    from remediate.host import budget
    from remediate.models import HostResult
else:  # `--help`, `--version` and option parsing need none of these: each loads when a command first uses it

    class _OnFirstUse:
        def __init__(self, name: str) -> None:
            self._name = name

        def __getattr__(self, attr: str) -> Any:
            return getattr(importlib.import_module(self._name), attr)

    _LAZY = ("api", "render", "render_bench", "fleet.settings", "fleet.sweep", "host.budget")
    api, render, render_bench, settings, sweep, budget = (_OnFirstUse(f"remediate.{n}") for n in _LAZY)

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "REMEDIATE", "max_content_width": 100}


def _ssh_options(kw: dict[str, Any], connect_timeout: float | None = None) -> Any:
    return settings.ssh_from_cli(kw, connect_timeout)  # the command line's connection options → SSHOptions


def _stdout() -> Console:
    return render.stdout_console()


def _stderr() -> Console:
    return render.stderr_console()


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    from remediate.core.unitfile.report import display_text

    click.echo(f"remediate: {display_text(message)}", err=True)
    sys.exit(code)


def _handle_errors(fn: F) -> F:
    """The CLI boundary: RemediateError → one line + its exit code; anything else is a bug (70)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RemediateError as exc:
            _fail(str(exc), exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception:  # noqa: BLE001 - the one place a bug is reported
            traceback.print_exc()
            click.echo("remediate: internal error (a bug); please report it with the traceback above", err=True)
            sys.exit(EXIT_BUG)
        return None

    return wrapper  # type: ignore[return-value]


def desired_options(fn: F) -> F:
    """The desired-state options shared by `edit`, `oom` and `plan`."""
    # fmt: off
    decorators = [
        click.option("--mem-fraction-static", metavar="F", help="Set --mem-fraction-static to F (0 < F < 1)."),
        click.option("--mem-fraction-step", metavar="S",
                     help="Without --mem-fraction-static: lower the current fraction by S (default 0.01), once."),
        click.option("--chunked-prefill-size", metavar="N",
                     help="Chunked prefill size (default 4096, kept if already smaller; -1 disables chunking)."),
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
        click.option(
            "--connect-timeout", type=click.FloatRange(min=1), help="Seconds to connect to each host (default 10)."
        ),
        click.option("--ssh-config", type=click.Path(dir_okay=False),
                     help="ssh_config file (default ~/.ssh/config); aliases and ProxyJump work."),
        click.option("--sudo", is_flag=True, help="Log in as a non-root user and run as root with `sudo -n`."),
        click.option("--unit", help="The systemd unit (default: the unit whose ExecStart runs sglang)."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout."),
    ]
    # fmt: on
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


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
            fn = click.option("--wait-timeout", type=click.FloatRange(min=1),
                              help="Seconds to wait for the server to come back (default 900).")(fn)  # fmt: skip
        if lock:
            fn = click.option("--lock-timeout", type=click.IntRange(min=1),
                              help="Seconds to wait for another run's lock on the unit (default 30).")(fn)  # fmt: skip
        return click.option("--timeout", type=click.FloatRange(min=1), hidden=True, help=f"Deprecated: {alias}.")(fn)

    return decorate


def _timeout(kw: dict[str, Any], name: str, default: float) -> float:
    value, warning = settings.pick_timeout(kw, name, default)
    if warning:
        click.echo(f"remediate: warning: {warning}", err=True)
    return value


def _emit(
    results: Sequence[HostResult], *, as_json: bool, dry_run: bool = False, extra: dict[str, Any] | None = None
) -> int:
    if as_json:
        click.echo(render.dumps(render.results_document(results, **(extra or {}))))
    else:
        out = _stdout()
        for result in results:
            render.host_report(out, result, dry_run=dry_run)
        if len(results) > 1:
            render.recap(out, results)
    return api.exit_code(results)


def _exit_with_rollout(rollout: api.RolloutResult, *, as_json: bool, dry_run: bool) -> None:
    """A mutating command's end: each host's report (or the JSON document), the retry file, the exit code."""
    code = _emit(rollout.results, as_json=as_json, dry_run=dry_run, extra=rollout.extra())
    if rollout.retry_file and not as_json:
        _stderr().print(f"retry file: {rollout.retry_file}", highlight=False)
    sys.exit(code)


def _exit_with_table(
    results: Sequence[HostResult], *, as_json: bool, table: Callable[[Console, Sequence[HostResult]], None]
) -> None:
    """A read-only command's end: one table (or the JSON document), the exit code."""
    if as_json:
        click.echo(render.dumps(render.results_document(results)))
    else:
        table(_stdout(), results)
    sys.exit(api.exit_code(results))


def _confirm(kw: dict[str, Any], progress: render.LiveProgress) -> Callable[[str], bool] | None:
    """--pause-after-canary asks on the terminal (the live display paused); --yes answers yes."""
    if not kw["pause_after_canary"] or kw["yes"]:
        return None

    def ask(text: str) -> bool:
        with progress.suspended():
            return click.confirm(text, default=False, err=True)

    return ask


def _progress(as_json: bool) -> render.LiveProgress:
    return render.LiveProgress(_stderr(), quiet=as_json)


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
        _fail(refused)


@cli.command()
@click.argument("unit_file", type=click.Path(path_type=Path))
@desired_options
@click.option("--write", is_flag=True, help="Write the change in place (after a backup UNIT_FILE.bak.oom.<epoch>).")
@click.option("--check", is_flag=True, help="Exit 1 when changes are needed, 0 when already remediated.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@_handle_errors
def edit(unit_file: Path, write: bool, check: bool, as_json: bool, **desired_kw: Any) -> None:
    """Show (and with --write apply) the OOM fix to a local unit file.

    \b
    Example:
      remediate edit examples/incident/sglang.service
      remediate edit sglang.service --mem-fraction-static 0.9 --write
    """
    edited = api.edit_unit_file(unit_file, write=write, **desired_kw)
    backup = str(edited.backup) if edited.backup else None
    if as_json:
        click.echo(render.dumps(render.edit_document(edited.plan, backup)))
    else:
        render.edit_report(_stdout(), str(unit_file), edited.plan, backup)
    if check and edited.plan.is_changed and not write:
        sys.exit(1)


@cli.command()
@connection_options
@desired_options
@fleet_options
@click.option("--min-tokens", type=click.IntRange(min=1), help="Fail (and roll back) below this max_total_num_tokens.")
@click.option(
    "--target-tokens", type=click.IntRange(min=1), help="Report the gap to this capacity (a warning, not a failure)."
)
@timeout_options(wait=True, lock=True, alias="--wait-timeout")
@click.option(
    "--retry-file", metavar="PATH", help="Inventory rollouts: write the retry file here (default: state dir)."
)
@click.option("--probe", type=click.IntRange(min=1), metavar="TOKENS", help="Prefill TOKENS when healthy, or undo.")
@click.option("--dry-run", is_flag=True, help="Show the diff, the flag summary and the remote steps; change nothing.")
@click.option("--force", is_flag=True, allow_from_autoenv=False,
              help="Apply even when the latest crash contradicts it (see diagnose).")  # fmt: skip
@click.option("--no-rollback", is_flag=True, allow_from_autoenv=False,
              help="Leave the new state in place when the server does not come back.")  # fmt: skip
@click.option("--auto", is_flag=True, help="Choose fraction, chunk and alloc conf per host from its evidence (plan).")
@_handle_errors
def oom(**kw: Any) -> None:
    """Apply the OOM fix to sglang hosts as one verified transaction each.

    Backs up the unit, lowers --mem-fraction-static, sets --chunked-prefill-size and
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, daemon-reloads, restarts, waits for
    max_total_num_tokens, and rolls back automatically if the server does not come back.

    \b
    Examples:
      remediate oom root@gpu-01 --dry-run
      remediate oom gpu-01 --target-tokens 200000 --json
      remediate oom gpu-* -i inventory.yaml --canary 1 --batch 25% --forks 4
    """
    from remediate.fleet.request import OomRequest

    request = OomRequest(
        targets=tuple(kw["targets"]),
        inventory=kw["inventory"],
        ssh=_ssh_options(kw),
        unit=kw["unit"],
        cli_desired=settings.parse_desired_args(kw),
        min_tokens=kw["min_tokens"],
        probe_tokens=kw["probe"],
        target_tokens=kw["target_tokens"],
        timeout=_timeout(kw, "wait_timeout", 900.0),
        dry_run=kw["dry_run"],
        rollback=not kw["no_rollback"],
        strategy=settings.strategy_from_cli(kw),
        force=kw["force"],
        retry_file=kw["retry_file"],
        lock_timeout=kw["lock_timeout"],
        auto=kw["auto"],
    )
    with _progress(kw["as_json"]) as progress:
        confirm = _confirm(kw, progress)
        rollout = api.remediate_oom_request(request, progress=progress, confirm=confirm)
    _exit_with_rollout(rollout, as_json=kw["as_json"], dry_run=kw["dry_run"])


@cli.command()
@connection_options
@timeout_options(wait=False, lock=False, alias="--connect-timeout")
@_handle_errors
def status(**kw: Any) -> None:
    """Read-only: each host's sglang unit, state, memory settings, tokens, and whether it is remediated.

    \b
    Examples:
      remediate status gpu-01 gpu-02
      remediate status all -i inventory.yaml --json
    """
    results = api.status(
        kw["targets"],
        inventory=kw["inventory"],
        ssh=_ssh_options(kw, _timeout(kw, "connect_timeout", 10.0)),
        unit=kw["unit"],
    )
    _exit_with_table(results, as_json=kw["as_json"], table=render.status_table)


@cli.command()
@connection_options
@click.option("--since", metavar="RESTARTS|TIME", help="Restarts to look back over (0: this run) or a journalctl time.")
@click.option("--lines", type=click.IntRange(min=1), default=2000, show_default=True, help="Journal lines to read.")
@timeout_options(wait=False, lock=False, alias="--connect-timeout")
@_handle_errors
def diagnose(**kw: Any) -> None:
    """Read-only: why each host's server died (evidence, arithmetic) and the `remediate oom` to run.

    \b
    Examples:
      remediate diagnose gpu-01 --since 1
      remediate diagnose all -i inventory.yaml --since '2 hours ago' --json
    """
    named = {k: kw[k] for k in ("inventory", "unit", "lines", "since")}
    _exit_with_table(api.diagnose(kw["targets"], ssh=_ssh_options(kw, _timeout(kw, "connect_timeout", 10.0)), **named),
                     as_json=kw["as_json"], table=render.diagnose_report)  # fmt: skip


@cli.command()
@connection_options
@click.option(
    "--prune", is_flag=True, help="Delete old backups beyond --keep (never the newest, never the current state's)."
)
@click.option(
    "--keep", type=click.IntRange(min=1), default=10, show_default=True, help="Backups to keep per file with --prune."
)
@click.option("--dry-run", is_flag=True, help="With --prune: list what would be deleted.")
@timeout_options(wait=False, lock=True, alias="--connect-timeout")
@_handle_errors
def backups(**kw: Any) -> None:
    """List the backups next to each host's unit files, newest first, with what a restore would change.

    \b
    Examples:
      remediate backups gpu-01
      remediate backups all -i inventory.yaml --prune --keep 5 --dry-run
    """
    results = api.backups(
        kw["targets"],
        inventory=kw["inventory"],
        ssh=_ssh_options(kw, _timeout(kw, "connect_timeout", 10.0)),
        unit=kw["unit"],
        prune_keep=kw["keep"] if kw["prune"] else None,
        dry_run=kw["dry_run"],
        lock_timeout=kw["lock_timeout"],
    )
    _exit_with_table(results, as_json=kw["as_json"], table=render.backups_table)


@cli.command()
@connection_options
@fleet_options
@click.option("--to", "to", default="latest", show_default=True, metavar="PATH|latest", help="The backup to restore.")
@timeout_options(wait=True, lock=True, alias="--wait-timeout")
@click.option(
    "--retry-file", metavar="PATH", help="Inventory rollouts: write the retry file here (default: state dir)."
)
@click.option("--dry-run", is_flag=True, help="Show what would be restored; change nothing.")
@_handle_errors
def rollback(**kw: Any) -> None:
    """Restore a unit from its backup as a verified transaction (backup, atomic write, restart, wait).

    The current unit is first saved as <file>.bak.rollback.<epoch>, so a rollback can be rolled back.

    \b
    Examples:
      remediate rollback gpu-01 --dry-run
      remediate rollback gpu-01 --to /etc/systemd/system/sglang.service.bak.oom.1795939200
      remediate rollback rack-a -i inventory.yaml --canary 1
    """
    with _progress(kw["as_json"]) as progress:
        confirm = _confirm(kw, progress)
        rollout = api.rollback(
            kw["targets"],
            inventory=kw["inventory"],
            ssh=_ssh_options(kw),
            unit=kw["unit"],
            to=kw["to"],
            timeout=_timeout(kw, "wait_timeout", 900.0),
            retry_file=kw["retry_file"],
            lock_timeout=kw["lock_timeout"],
            dry_run=kw["dry_run"],
            strategy=settings.strategy_from_cli(kw),
            progress=progress,
            confirm=confirm,
        )
    _exit_with_rollout(rollout, as_json=kw["as_json"], dry_run=kw["dry_run"])


@cli.command(epilog="Example: remediate bench gpu-01 --contexts 1k,32k,185k --runs 3 --plot bench.png")
@connection_options
@click.option(
    "--contexts",
    default=lambda: sweep.DEFAULT_CONTEXTS,
    show_default="1k,8k,32k,46k,92k,185k",
    help="Prompt lengths; 1k = 1024.",
)
@click.option(
    "--gen", type=click.IntRange(min=1), default=lambda: sweep.DEFAULT_GEN, show_default="24", help="New tokens."
)
@click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True, help="Requests per length.")
@click.option("--warmup", type=click.IntRange(min=0), default=0, show_default=True, help="Unmeasured requests first.")
@click.option("--output", metavar="FILE.jsonl", help="Append one JSON line per point (bench_serving-like schema).")
@click.option("--csv", "csv_path", metavar="FILE", help="Write the points as CSV.")
@click.option("--plot", metavar="FILE.png", help="Plot TTFT and decode tok/s against context (remediate[plot]).")
@_handle_errors
def bench(**kw: Any) -> None:
    """Prove the fix: the incident's long-context sweep at exact token counts (read-only, host after host)."""
    request = sweep.request_from_cli(kw, _ssh_options(kw))
    with render_bench.BenchProgress(_stderr(), points_per_host=len(request.args.contexts), quiet=kw["as_json"]) as bar:
        results = api.bench(request=request, progress=bar)
    render_bench.bench_report(_stdout(), results, request.args, as_json=kw["as_json"])
    sys.exit(sweep.finish(results, request, version=__version__))


# fmt: off
@cli.command()
@connection_options
@click.option("--target-tokens", type=click.IntRange(min=1), help="The pool size wanted (max_total_num_tokens).")
@click.option("--chunked-prefill-size", type=int, metavar="N", help="The chunk to plan with (default 4096).")
@click.option("--margin", type=click.FloatRange(0, 10), default=0.1, show_default=True, help="Spare headroom share.")
@click.option("--offline", is_flag=True, help="What-if without a host: free GiB before/after weights, KV bytes/token.")
@click.option("--gpu-mem-gib", type=float, help="--offline: free GiB before the weights load (sglang's total).")
@click.option("--free-after-weights-gib", type=float, help="--offline: free GiB after the weights load.")
@click.option("--cell-bytes", type=float, help="--offline: KV cache bytes per token per rank.")
@click.option("--page-size", type=click.IntRange(min=1), default=1, help="--offline: the KV page size (default 1).")
@_handle_errors
def plan(**kw: Any) -> None:
    """Read-only: KV pool and headroom per fraction, the largest that fits. Example: remediate plan gpu-01"""
    if kw["offline"]:
        doc = budget.offline_plan(**{k: kw[k] for k in budget.OFFLINE_KEYS})
        return click.echo(render.dumps({"offline": True, "plan": doc})) if kw["as_json"] else render.plan_table(
            _stdout(), doc, title="offline plan")
    keys = ("unit", "target_tokens", "chunked_prefill_size", "margin")
    results = api.plan(kw["targets"], inventory=kw["inventory"], ssh=_ssh_options(kw), **{k: kw[k] for k in keys})
    _exit_with_table(results, as_json=kw["as_json"], table=render.plan_report)
# fmt: on


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="remediate")


if __name__ == "__main__":  # pragma: no cover
    main()
