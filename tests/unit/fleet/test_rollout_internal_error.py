"""A worker that raises something that is not a RemediateError (a bug, or a library exception that escaped
translation) fails only its host: the other hosts' results and the retry file are kept, the run exits 70,
and the traceback goes to the log, not to the terminal. The fault cannot be made real, so a scripted host's
transport raises it (pytest-mock) — the fake transport of tests/support/fake_transport.py, three inventory hosts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from pytest_mock import MockerFixture

from remediate import api
from remediate.api import hosts as api_hosts
from remediate.cli import cli
from remediate.controller.internal_errors import INTERNAL_ERRORS
from remediate.errors import EXIT_BUG
from remediate.fleet.inventory import HostEntry
from remediate.fleet.request import OomRequest, StrategyArgs
from remediate.fleet.rollout import Rollout, Strategy
from remediate.models import HostResult
from remediate.transport.base import SSHOptions
from tests.support.fake_transport import FakeTransport
from tests.support.hosts import FLEET_NAMES as NAMES
from tests.support.hosts import remediating_host

BROKEN = "gpu-a02"
UNIT = "sglang.service"
PATH = f"/etc/systemd/system/{UNIT}"
OOM_JOURNAL = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB\n"


class Factory:
    """One scripted host per inventory entry; the broken one's transport raises KeyError on every command."""

    def __init__(self, mocker: MockerFixture) -> None:
        self.hosts = {name: remediating_host(name) for name in NAMES}
        self.boom = mocker.patch.object(self.hosts[BROKEN], "run", side_effect=KeyError("ExecStart"))

    def __call__(self, entry: HostEntry, options: SSHOptions) -> FakeTransport:
        return self.hosts[entry.name]


def _request(inventory: Path) -> OomRequest:
    strategy = StrategyArgs(canary=0, max_failures="100%")  # every host runs: the bug must not stop the others
    return OomRequest(targets=("all",), inventory=str(inventory), strategy=strategy)


def test_a_worker_bug_fails_only_its_host_and_keeps_the_retry_file(
    inventory: Path, mocker: MockerFixture, _state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    factory = Factory(mocker)
    with caplog.at_level(logging.ERROR, logger="remediate.fleet.rollout"):
        rollout = api.remediate_oom(_request(inventory), transport_factory=factory)

    assert factory.boom.called, "the injected fault never fired"
    by_host = {r.host: r for r in rollout.results}
    assert list(by_host) == list(NAMES)  # every host's result, in inventory order
    for name in NAMES:
        if name != BROKEN:
            assert by_host[name].outcome == "remediated", by_host[name].error
            assert by_host[name].max_total_num_tokens == 195011
    broken = by_host[BROKEN]
    assert broken.outcome == "failed" and broken.exit_code == EXIT_BUG
    assert broken.error is not None and broken.error.startswith("internal error: KeyError: 'ExecStart'"), broken.error
    assert api.exit_code(rollout.results) == EXIT_BUG == 70
    # the retry file names the broken host only
    assert rollout.retry_file is not None
    assert list(yaml.safe_load(Path(rollout.retry_file).read_text())["hosts"]) == [BROKEN]
    # the traceback: in the log and in the state directory's internal-errors.log, which the error names
    log = _state_dir / INTERNAL_ERRORS
    assert f"the traceback is in {log}" in broken.error
    text = log.read_text()
    assert f" {BROKEN}\n" in text and "Traceback (most recent call last)" in text and "KeyError: 'ExecStart'" in text
    (record,) = [r for r in caplog.records if r.name == "remediate.fleet.rollout"]
    assert record.levelno == logging.ERROR and BROKEN in record.getMessage() and "KeyError" in record.getMessage()


def test_the_cli_reports_the_bug_as_one_line_per_host_and_exits_70(inventory: Path, mocker: MockerFixture) -> None:
    factory = Factory(mocker)
    mocker.patch.object(api_hosts, "_default_transport", factory)
    result = CliRunner().invoke(cli, ["oom", "all", "-i", str(inventory), "--canary", "0", "--max-failures", "100%"])
    assert result.exit_code == EXIT_BUG, result.output
    assert "Traceback" not in result.stdout + result.stderr  # no crash on the terminal
    assert "internal error: KeyError: 'ExecStart'" in result.stdout + result.stderr
    assert "retry file:" in result.stderr


def test_the_rollout_turns_any_worker_exception_into_that_hosts_result() -> None:
    """Rollout itself (any per-host job, not only `oom`): the exception becomes the host's failed result."""
    calls: list[str] = []

    def work(name: str) -> HostResult:
        calls.append(name)
        if name == "b":
            raise RuntimeError("escaped")
        return HostResult(host=name, outcome="remediated")

    results = Rollout(hosts=["a", "b", "c"], name_of=str, work=work, strategy=Strategy(canary=0, max_failures="100%"))
    out = results.run()
    assert [r.host for r in out] == ["a", "b", "c"] and sorted(calls) == ["a", "b", "c"]
    assert [r.outcome for r in out] == ["remediated", "failed", "remediated"]
    assert out[1].error is not None and out[1].error.startswith("internal error: RuntimeError: escaped")
    assert out[1].exit_code == EXIT_BUG


def test_internal_errors_log_is_masked_and_private(_state_dir: Path) -> None:
    """A bug's exception text that quotes a secret (a unit line, an env file) is masked in the log file, the
    error and the log record; the file is created 0600, and an existing world-readable one is made 0600."""
    log = _state_dir / INTERNAL_ERRORS
    log.write_text("--- earlier\n")
    log.chmod(0o644)

    def work(name: str) -> HostResult:
        raise ValueError('bad line: Environment="HF_TOKEN=hf_Secret9" ExecStart=x --api-key sk-Secret10')

    (out,) = Rollout(hosts=["a"], name_of=str, work=work, strategy=Strategy(canary=0, max_failures="100%")).run()
    assert out.error is not None and "hf_Secret9" not in out.error and "sk-Secret10" not in out.error
    text = log.read_text()
    assert text.startswith("--- earlier\n") and "ValueError: bad line" in text
    assert "hf_Secret9" not in text and "sk-Secret10" not in text and '"HF_TOKEN=***"' in text
    assert log.stat().st_mode & 0o777 == 0o600
    log.unlink()
    Rollout(hosts=["b"], name_of=str, work=work, strategy=Strategy(canary=0, max_failures="100%")).run()
    assert log.stat().st_mode & 0o777 == 0o600 and "hf_Secret9" not in log.read_text()
