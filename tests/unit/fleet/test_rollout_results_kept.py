"""Results are never lost (issue 20): where they go (the state directory, the retry file) is checked before
any host is touched; a retry file that cannot be written later is a warning beside the full results; a second
Ctrl-C while results are collected, or a raising ``confirm``/``on_event`` callback, keeps every result gathered
so far. Scripted hosts (tests/support/hosts.py), three inventory hosts, through the API and the CLI."""

from __future__ import annotations

import _thread
import json
import signal
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from pytest_mock import MockerFixture

from remediate import api
from remediate.api import hosts as api_hosts
from remediate.cli import cli
from remediate.errors import ConfigError
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest, StrategyArgs
from remediate.fleet.rollout import Rollout, Strategy
from remediate.models import CommandResult, HostResult
from remediate.transport.base import SSHOptions
from tests.support.hosts import FLEET_NAMES as NAMES
from tests.support.hosts import commit_ok, remediating_host


class Hosts:
    def __init__(self) -> None:
        self.hosts = {name: remediating_host(name) for name in NAMES}
        conflict = self.hosts[NAMES[1]]  # this one fails: its unit changed since it was read
        conflict.on(r"# remediate commit", CommandResult("bash -s", 76, "@@error conflict it changed\n@@exit 76\n", ""))
        conflict._rules.insert(0, conflict._rules.pop())

    def __call__(self, entry: HostEntry, options: SSHOptions) -> object:
        return self.hosts[entry.name]

    def touched(self) -> list[str]:
        return [n for n, h in self.hosts.items() if h.calls or h.held]


def request(inventory: Path, strategy: StrategyArgs | None = None, retry_file: str | None = None) -> OomRequest:
    strategy = strategy or StrategyArgs(canary=0, max_failures="100%")
    return OomRequest(targets=("all",), inventory=str(inventory), strategy=strategy, retry_file=retry_file)


def test_an_unwritable_retry_file_is_bad_input_before_any_host_is_touched(inventory: Path, tmp_path: Path) -> None:
    hosts = Hosts()
    where = tmp_path / "missing" / "retry.yaml"
    with pytest.raises(ConfigError, match="retry file") as caught:
        api.remediate_oom(request(inventory, retry_file=str(where)), transport_factory=hosts)
    assert str(where.parent) in str(caught.value) and caught.value.exit_code == 2
    assert hosts.touched() == []


def test_an_unwritable_state_dir_is_bad_input_before_any_host_is_touched(
    inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(blocker / "state"))
    hosts = Hosts()
    with pytest.raises(ConfigError, match="state directory"):
        api.remediate_oom(request(inventory), transport_factory=hosts)
    assert hosts.touched() == []


def test_the_cli_says_one_line_naming_the_retry_path_and_exits_2(
    inventory: Path, tmp_path: Path, mocker: MockerFixture
) -> None:
    hosts = Hosts()
    mocker.patch.object(api_hosts, "_default_transport", hosts)
    where = tmp_path / "missing" / "retry.yaml"
    got = CliRunner().invoke(cli, ["oom", "all", "-i", str(inventory), "--canary", "0", "--retry-file", str(where)])
    assert got.exit_code == 2, got.output
    lines = [line for line in (got.stdout + got.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and str(where.parent) in lines[0], lines
    assert hosts.touched() == []


def test_a_retry_file_that_cannot_be_written_after_the_run_is_the_rollout_s_warning_beside_every_result(
    inventory: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "retry"
    folder.mkdir()
    hosts = Hosts()

    def factory(entry: HostEntry, options: SSHOptions) -> object:
        if folder.is_dir():
            folder.rmdir()  # the directory is replaced by a file while the hosts are worked on
            folder.write_text("")
        return hosts(entry, options)

    rollout = api.remediate_oom(request(inventory), transport_factory=factory, retry_dir=str(folder))
    by_host = {r.host: r for r in rollout.results}
    assert list(by_host) == list(NAMES)
    assert by_host[NAMES[0]].outcome == "remediated" and by_host[NAMES[2]].outcome == "remediated"
    failed = by_host[NAMES[1]]
    assert failed.outcome == "failed" and not failed.warnings
    assert rollout.retry_file is None and len(rollout.warnings) == 1 and "retry file not written" in rollout.warnings[0]
    assert rollout.extra()["rollout"]["warnings"] == rollout.warnings  # --json says it too


def test_a_raising_confirm_keeps_the_canary_result(inventory: Path) -> None:
    hosts = Hosts()

    def confirm(_question: str) -> bool:
        raise RuntimeError("the prompt's terminal is gone")

    req = request(inventory, strategy=StrategyArgs(canary=1, max_failures="100%", pause_after_canary=True))
    rollout = api.remediate_oom(req, transport_factory=hosts, confirm=confirm)
    outcomes = [r.outcome for r in rollout.results]
    assert outcomes == ["remediated", "not_attempted", "not_attempted"], outcomes
    assert rollout.halted and "confirm callback raised RuntimeError" in rollout.halted


def work_of(results: dict[str, HostResult]) -> object:
    def work(name: str) -> HostResult:
        return results.get(name) or HostResult(host=name, outcome="remediated", exit_code=0)

    return work


def test_a_raising_on_event_keeps_every_result_gathered() -> None:
    seen: list[str] = []

    def on_event(text: str) -> None:
        seen.append(text)
        if text.startswith("batch 2/"):
            raise ValueError("the caller's log is closed")

    rollout = Rollout(
        hosts=list(NAMES),
        name_of=str,
        work=work_of({}),  # type: ignore[arg-type]
        strategy=Strategy(canary=1, batch=("1",)),
        on_event=on_event,
    )
    results = rollout.run()
    assert [r.outcome for r in results] == ["remediated", "not_attempted", "not_attempted"]
    assert rollout.halted and "ValueError" in rollout.halted


@pytest.mark.usefixtures("default_sigint")
def test_a_second_ctrl_c_while_results_are_collected_keeps_every_result() -> None:
    """Ctrl-C, then Ctrl-C again while the in-flight host is waited for: the finished host's result is kept,
    the in-flight one is reported as such (before: the second KeyboardInterrupt lost every result)."""
    release = threading.Event()
    rollout: Rollout[str]

    def work(name: str) -> HostResult:
        if name == NAMES[1]:
            _thread.interrupt_main()  # the first Ctrl-C
            deadline = time.monotonic() + 10
            while not rollout.interrupted and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # the main thread is now waiting for this host
            # The second, as a real Ctrl-C: SIGINT to the main thread interrupts its blocking wait for this host
            # (interrupt_main only sets a flag, which a blocked wait reads once this host is done: 10 s later).
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            release.wait(10)
        return HostResult(host=name, outcome="remediated", exit_code=0)

    rollout = Rollout(
        hosts=list(NAMES[:2]), name_of=str, work=work, strategy=Strategy(canary=0, forks=1, max_failures="100%")
    )
    try:
        results = rollout.run()
    finally:
        release.set()
    assert [r.host for r in results] == list(NAMES[:2])
    assert results[0].outcome == "remediated"
    assert results[1].outcome == "failed" and "interrupted twice" in (results[1].error or "")
    assert rollout.interrupted and rollout.given_up


@pytest.mark.usefixtures("default_sigint")
def test_the_cli_keeps_every_result_after_a_second_ctrl_c(inventory: Path, mocker: MockerFixture) -> None:
    """Through the CLI: the second host's commit is where Ctrl-C comes, twice. The first host's result is
    printed, the in-flight one is reported as such, the third not attempted; no traceback."""
    hosts = Hosts()
    busy = hosts.hosts[NAMES[1]]
    busy._rules.pop(0)  # this one commits fine, but slowly: the Ctrl-Cs come meanwhile

    def slow_commit(_command: str, _stdin: str | None) -> CommandResult:
        _thread.interrupt_main()
        time.sleep(0.5)
        _thread.interrupt_main()
        time.sleep(0.5)
        return CommandResult("bash -s", 0, commit_ok(), "")

    busy.on(r"# remediate commit", slow_commit)
    busy._rules.insert(0, busy._rules.pop())
    mocker.patch.object(api_hosts, "_default_transport", hosts)
    args = ["oom", "all", "-i", str(inventory), "--canary", "0", "--forks", "1", "--max-failures", "100%", "--json"]
    got = CliRunner().invoke(cli, args)
    assert "Traceback" not in got.stdout + got.stderr, got.stdout + got.stderr
    doc = json.loads(got.stdout)
    outcomes = {r["host"]: r["outcome"] for r in doc["results"]}
    assert outcomes == {NAMES[0]: "remediated", NAMES[1]: "failed", NAMES[2]: "not_attempted"}, outcomes
    assert doc["rollout"]["interrupted"] is True
    assert got.exit_code == 1


def test_a_retry_file_that_cannot_be_written_is_one_warning_for_the_rollout(
    inventory: Path, tmp_path: Path, mocker: MockerFixture
) -> None:
    """Two hosts fail and the retry file cannot be written: the terminal says so once, not once per host."""
    where = tmp_path / "retry.yaml"
    hosts = Hosts()
    second = hosts.hosts[NAMES[2]]  # fails like NAMES[1]: its unit changed since it was read
    second.on(r"# remediate commit", CommandResult("bash -s", 76, "@@error conflict it changed\n@@exit 76\n", ""))
    second._rules.insert(0, second._rules.pop())

    def factory(entry: HostEntry, options: SSHOptions) -> object:
        where.mkdir(exist_ok=True)  # the retry file's name is taken by a directory while the hosts are worked on
        return hosts(entry, options)

    mocker.patch.object(api_hosts, "_default_transport", factory)
    argv = ["oom", "all", "-i", str(inventory), "--canary", "0", "--max-failures", "100%", "--retry-file", str(where)]
    got = CliRunner().invoke(cli, argv)
    assert got.exit_code == 1, got.output
    assert (got.stdout + got.stderr).count("retry file not written") == 1, got.stdout + got.stderr


def test_canary_zero_on_the_command_line_is_no_canary_batch(inventory: Path, mocker: MockerFixture) -> None:
    """`--canary 0` is a value given, not an option left out: the first batch is the whole fleet (it once read
    as "not given" and the default canary of 1 ran first)."""
    mocker.patch.object(api_hosts, "_default_transport", Hosts())
    args = ["oom", "all", "-i", str(inventory), "--canary", "0", "--max-failures", "100%", "--dry-run", "--json"]
    got = CliRunner().invoke(cli, args)
    batches = json.loads(got.stdout)["rollout"]["batches"]
    assert batches == [list(NAMES)], batches
