"""Every transaction leaves a record on both sides: the host's journal (``logger -t remediate``: unit,
old → new values, backup paths, masked) and the controller's state dir (``transactions.jsonl``)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from remediate.host.common import templates
from remediate.host.common.commit import FileWrite, commit
from remediate.models import HostResult
from tests.support import hosts
from tests.support.fake_transport import FakeTransport, state_output

EPOCH = 1_764_400_000
OLD = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --mem-fraction-static 0.94\n"
NEW = "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --mem-fraction-static 0.93\n"


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_commit_script_logs_the_change_and_the_backup_to_the_journal(tmp_path: Path) -> None:
    """The rendered script run by bash, with a stand-in ``logger`` on PATH recording its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    logged = tmp_path / "logged"
    (bin_dir / "logger").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {shlex.quote(str(logged))}\n')
    (bin_dir / "logger").chmod(0o755)
    target = tmp_path / "units" / "sglang.service"
    target.parent.mkdir()
    target.write_text(OLD)
    note = "remediate oom sglang.service: --mem-fraction-static 0.94 → 0.93 (ExecStart=); HF_TOKEN=hf_Secret1"
    script = templates.render(
        "commit.sh.j2", unit="sglang.service", files=[FileWrite(str(target), OLD, NEW).render_args()],
        epoch=EPOCH, restart=False, analyze=False, journal=" ".join(note.split()).replace("hf_Secret1", "***"),
        log_path=str(tmp_path / "run" / "commit.log"), commit_lock=str(tmp_path / "run" / "lock.commit"),
    )  # fmt: skip
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-s"], input=script.encode(), capture_output=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    args = logged.read_text().splitlines()
    backup = f"{target}.bak.oom.{EPOCH}"
    assert args == ["-t", "remediate", "--", note.replace("hf_Secret1", "***") + f"; backup {backup}"]
    assert Path(backup).read_text() == OLD and target.read_text() == NEW


def test_commit_masks_the_journal_line_it_is_given() -> None:
    host = hosts.oom_host()
    host.on(hosts.COMMIT, hosts.commit_ok())
    commit(
        host, "sglang.service", [FileWrite(hosts.UNIT_PATH, OLD, NEW)], epoch=EPOCH, journal="x --api-key sk-Leak2\n y"
    )
    [script] = host.scripts("# remediate commit")
    assert "sk-Leak2" not in script and "msg='x --api-key *** y'" in script and "logger -t remediate" in script


def _records(state: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (state / "transactions.jsonl").read_text().splitlines()]


def _remediated_run() -> tuple[FakeTransport, HostResult]:
    """One healthy `oom` run on a scripted host: the host (what it was sent) and the result."""
    host = hosts.oom_host()
    host.on(hosts.COMMIT, hosts.commit_ok())
    host.on(hosts.POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", hosts.info(206635))
    return host, hosts.run_oom(host)


def test_remediation_is_recorded_in_the_state_dir(_state_dir: Path) -> None:
    host, result = _remediated_run()
    assert result.outcome == "remediated", result.error
    ahead, committed, done = _records(_state_dir)
    # Written before the commit ran: the backups it is about to make (a controller killed meanwhile still
    # names them for the next run's undo).
    assert ahead["event"] == "committing" and ahead["backups"] == [f"{hosts.UNIT_PATH}.bak.oom.{hosts.EPOCH}"]
    assert committed["event"] == "committed" and done["event"] == "remediated"
    assert committed["host"] == "gpu-01" and committed["unit"] == "sglang.service"
    assert "--mem-fraction-static 0.94 → 0.93" in str(committed["changes"])
    assert committed["backups"] == [f"{hosts.UNIT_PATH}.bak.oom.{hosts.EPOCH}"]
    [script] = host.scripts("# remediate commit")
    assert "logger -t remediate" in script and "--mem-fraction-static 0.94 → 0.93" in script
    assert (_state_dir / "transactions.jsonl").stat().st_mode & 0o777 == 0o600


def test_rolled_back_run_is_recorded(_state_dir: Path) -> None:
    host = hosts.oom_host()
    host.on(hosts.COMMIT, hosts.commit_ok(), hosts.commit_ok(invocation="inv-3", backup=False))
    host.on(
        hosts.POLL,
        state_output("failed", "failed", result="exit-code", invocation_id="inv-2", main_pid=0),
        state_output(invocation_id="inv-3"),
    )
    host.http("/health", 200)
    host.http("/server_info", hosts.info(180000))
    result = hosts.run_oom(host)
    assert result.outcome == "rolled_back", result.error
    events = [r["event"] for r in _records(_state_dir)]
    assert events == ["committing", "committed", "rolling_back", "rolled_back"]
    _, undo = host.scripts("# remediate commit")
    assert "remediate undo sglang.service" in undo


def test_an_unwritable_state_dir_is_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(blocker / "state"))
    host, result = _remediated_run()
    assert result.outcome == "remediated"
    assert any("transaction record not written" in w for w in result.warnings)
