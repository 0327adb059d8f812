"""Several sglang units on one host through the Python API, one scripted host (FakeTransport): a row per
unit for the read-only commands, `--unit` globs listed on the host, `oom` on the crashed units only, the
one-line refusals, and the retry file naming the failed host+unit pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from remediate import api
from remediate.cli.render import console as render_console
from remediate.fleet.request import OomRequest
from remediate.host.units import bundle
from remediate.models import HostResult
from tests.support.fake_transport import FakeTransport, exec_start_value, probe_output
from tests.support.hosts import INCIDENT

ROOT = Path(__file__).resolve().parents[3]
OOM_JOURNAL = (ROOT / "tests" / "data" / "diagnosis_cases" / "incident-kimi-tp8" / "journal.txt").read_text()
HOST = "127.0.0.9"  # an address: the repository's ./inventory.yaml is not read
CHAT, EMBED = "sglang-chat.service", "sglang-embed.service"
ARGV = ("/opt/sglang/bin/python3", "-m", "sglang.launch_server", "--port", "30000")


def _unit_answer(unit: str, *, crashed: bool) -> str:
    path = f"/etc/systemd/system/{unit}"
    shown = {
        "FragmentPath": path,
        "DropInPaths": "",
        "ExecStart": exec_start_value(ARGV),
        "EnvironmentFiles": "",
        "NeedDaemonReload": "no",
        "ActiveState": "failed" if crashed else "inactive",
        "SubState": "failed" if crashed else "dead",
        "Result": "exit-code" if crashed else "success",
        "NRestarts": 1 if crashed else 0,
        "MainPID": 0,
        "InvocationID": "inv-1",
    }
    journal = OOM_JOURNAL.splitlines() if crashed else []
    tail = ["@@journal", *journal, "@@gpus absent", "@@ps", "  1     0"]
    return probe_output(unit, shown, {path: INCIDENT}).removesuffix("@@end\n") + "\n".join(tail) + "\n@@end\n"


def two_units(*, chat_crashed: bool = True, embed_crashed: bool = False, listing: str = "") -> FakeTransport:
    """127.0.0.9 with sglang-chat.service and sglang-embed.service (detection finds both)."""
    fake = FakeTransport(HOST)
    fake.on(r"^unit=''$", f"@@now 1\n@@analyze 0\n@@units {CHAT} {EMBED}\n@@end\n")
    fake.on(rf"^unit={CHAT}$", _unit_answer(CHAT, crashed=chat_crashed))
    fake.on(rf"^unit={EMBED}$", _unit_answer(EMBED, crashed=embed_crashed))
    fake.on(
        r"# remediate units", listing or f"@@units\n{CHAT} loaded failed failed x\n@@files\n{EMBED} enabled\n@@end\n"
    )
    return fake


def _doc(results: list[HostResult]) -> list[dict[str, object]]:
    return json.loads(render_console.dumps(render_console.results_document(results)))["results"]  # type: ignore[no-any-return]


def _units_run(fake: FakeTransport) -> list[str]:
    """The units each one-unit probe named, in order (detection's own probe left out)."""
    import re

    names = [re.search(r"^unit=(.*)$", c.stdin or "", re.MULTILINE) for c in fake.calls]
    return [m[1] for m in names if m and m[1] != "''"]


READ_ONLY = {"status": api.StatusRequest, "diagnose": api.DiagnoseRequest, "backups": api.BackupsRequest,
             "plan": api.PlanRequest}  # fmt: skip


@pytest.mark.parametrize("command", sorted(READ_ONLY))
def test_read_only_commands_give_one_row_per_unit(command: str) -> None:
    fake = two_units()
    if command == "backups":
        fake.on(r"# remediate backups|\bbackups\b", "@@end\n")
    if command == "plan":
        fake.on(r"\Ajournalctl", "@@journal-tail\n")
    results = getattr(api, command)(READ_ONLY[command](targets=(HOST,)), transport_factory=lambda entry, ssh: fake)
    rows = _doc(results)
    assert [(r["host"], r["unit"]) for r in rows] == [(HOST, CHAT), (HOST, EMBED)], rows
    assert fake.opened >= 1 and fake.closed == 1  # one connection for both units


def test_diagnose_names_each_units_own_command() -> None:
    rows = _doc(api.diagnose(api.DiagnoseRequest(targets=(HOST,)), transport_factory=lambda entry, ssh: two_units()))
    chat, embed = rows
    assert chat["findings"] and f"--unit {CHAT} " in chat["recommendation"]["command"]  # type: ignore[index]
    assert embed["findings"] == []


def test_a_glob_is_listed_on_the_host_and_matched_as_systemd_matches() -> None:
    fake = two_units()
    rows = _doc(
        api.status(
            api.StatusRequest(targets=(HOST,), unit="sglang-*.service"), transport_factory=lambda entry, ssh: fake
        )
    )
    assert [r["unit"] for r in rows] == [CHAT, EMBED]
    [listing] = [c for c in fake.calls if c.stdin and c.stdin.startswith("# remediate units")]
    assert "--type=service -- 'sglang-*.service'" in listing.stdin  # type: ignore[operator]
    rows = _doc(
        api.status(
            api.StatusRequest(targets=(HOST,), unit="sglang-e*"), transport_factory=lambda entry, ssh: two_units()
        )
    )
    assert [r["unit"] for r in rows] == [EMBED]


def test_a_glob_that_matches_nothing_is_one_line_bad_input() -> None:
    fake = two_units(listing="@@units\n@@files\n@@end\n")
    [row] = _doc(
        api.status(api.StatusRequest(targets=(HOST,), unit="vllm-*"), transport_factory=lambda entry, ssh: fake)
    )
    assert row["error"] == "127.0.0.9: --unit 'vllm-*' matches no service unit" and row["outcome"] == "failed"
    assert _units_run(fake) == []


def test_one_exact_unit_is_the_one_unit_run_as_before() -> None:
    fake = two_units()
    [row] = _doc(api.status(api.StatusRequest(targets=(HOST,), unit=CHAT), transport_factory=lambda entry, ssh: fake))
    assert row["unit"] == CHAT and "units" not in row
    assert len(fake.calls) == 1  # no listing, no detection: the one probe


def _oom(fake: FakeTransport, **kw: object) -> list[dict[str, object]]:
    request = OomRequest(targets=(HOST,), dry_run=True, **kw)  # type: ignore[arg-type]
    return _doc(api.remediate_oom(request, transport_factory=lambda entry, ssh: fake).results)


def test_oom_without_unit_acts_on_the_crashed_unit_only() -> None:
    fake = two_units(chat_crashed=True, embed_crashed=False)
    [row] = _oom(fake)
    assert row["host"] == HOST and row["unit"] == CHAT and row["changed"] is True, row
    # the crash evidence of both was read, then only the crashed one was run
    assert _units_run(fake) == [CHAT, EMBED, CHAT]


def test_oom_with_a_glob_acts_on_the_crashed_matches() -> None:
    fake = two_units(chat_crashed=False, embed_crashed=True)
    [row] = _oom(fake, unit="sglang-*")
    assert row["unit"] == EMBED


def test_oom_on_two_crashed_units_runs_each_in_turn() -> None:
    fake = two_units(chat_crashed=True, embed_crashed=True)
    rows = _oom(fake)
    assert [r["unit"] for r in rows] == [CHAT, EMBED]
    assert _units_run(fake) == [CHAT, EMBED, CHAT, EMBED]


def test_oom_refuses_when_none_crashed_listing_the_units() -> None:
    fake = two_units(chat_crashed=False, embed_crashed=False)
    [row] = _oom(fake)
    assert row["outcome"] == "failed" and row["unit"] is None
    assert row["error"] == (
        f"127.0.0.9: several sglang units ({CHAT}, {EMBED}) and none crashed by the journal's evidence: pass --unit "
        f"with the one(s) to act on, e.g. `remediate oom 127.0.0.9 --unit {CHAT}`"
    )
    assert row["units"] == {CHAT: "not crashed", EMBED: "not crashed"}
    assert _units_run(fake) == [CHAT, EMBED]  # read only


def test_oom_refuses_when_a_units_evidence_is_unreadable() -> None:
    fake = two_units()
    fake._rules = [r for r in fake._rules if EMBED not in r.pattern.pattern]
    fake.on(rf"^unit={EMBED}$", 1)  # the probe fails
    [row] = _oom(fake)
    assert "crash evidence of some is unreadable" in str(row["error"]) and f"--unit {EMBED}" in str(row["error"])


def test_rollback_without_unit_on_several_keeps_its_refusal() -> None:
    fake = two_units()
    result = api.rollback(api.RollbackRequest(targets=(HOST,), dry_run=True), transport_factory=lambda entry, ssh: fake)
    [row] = _doc(result.results)
    assert row["error"] == f"127.0.0.9: several units run sglang or vLLM ({CHAT}, {EMBED}); pass --unit"


def test_the_retry_file_names_the_failed_host_unit_pairs(tmp_path: Path) -> None:
    from remediate.fleet.inventory import load_inventory
    from remediate.fleet.retry import write_retry_file

    inv_path = tmp_path / "inventory.yaml"
    inv_path.write_text("hosts:\n  127.0.0.9: {address: 127.0.0.1}\n  gpu-02: {address: 127.0.0.2}\n")
    inventory = load_inventory(str(inv_path))
    ok = HostResult(HOST, outcome="remediated", unit=CHAT)
    bad = HostResult(HOST, outcome="rolled_back", unit=EMBED, exit_code=1)
    worse = HostResult(HOST, outcome="failed", unit="sglang-x.service", exit_code=1)
    plain = HostResult("gpu-02", outcome="failed", unit="sglang.service", exit_code=1)
    path = write_retry_file(inventory, [bundle(HOST, [ok, bad, worse]), plain], path=str(tmp_path / "r.yaml"))
    assert path is not None
    hosts = yaml.safe_load(Path(path).read_text())["hosts"]
    assert hosts == {
        HOST: {"address": "127.0.0.1", "unit": f"{EMBED},sglang-x.service"},
        "gpu-02": {"address": "127.0.0.2"},  # one unit: the host, as before
    }
    again = OomRequest(unit=hosts[HOST]["unit"])
    assert again.unit == f"{EMBED},sglang-x.service"  # --unit (and the host var) take it back


def test_oom_with_a_glob_matching_one_healthy_unit_is_refused() -> None:
    """A glob asks for the crashed units even when it matches one: a healthy server is not restarted."""
    fake = two_units(chat_crashed=False)
    [row] = _oom(fake, unit="sglang-c*")
    assert row["error"] == (
        f"{HOST}: one sglang unit ({CHAT}) and none crashed by the journal's evidence: pass --unit with the one(s) "
        f"to act on, e.g. `remediate oom {HOST} --unit {CHAT}`"
    )
    assert _units_run(fake) == [CHAT]


def test_rollback_with_a_glob_restores_each_matched_unit_in_turn() -> None:
    fake = two_units()
    fake.on(r"# remediate backups|\bbackups\b", "@@end\n")
    result = api.rollback(
        api.RollbackRequest(targets=(HOST,), unit="sglang-*", dry_run=True), transport_factory=lambda entry, ssh: fake
    )
    assert [(r.host, r.unit) for r in result.results] == [(HOST, CHAT), (HOST, EMBED)]
    assert _units_run(fake)[:1] == [CHAT] and EMBED in _units_run(fake)  # no crash check: a rollback is named
