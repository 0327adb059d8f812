"""The units watched: with none named, each host's engine units as `oom` finds them (several per host, each
watched on its own), a host with none named in one line and reported, looked at again later; a named unit
systemd does not know is never polled as an inactive one. And what a fix is told and tells: the host as
polled, the change it made in the outcome record; a fix left by a dead watcher of the same PID recovered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediate.api.watch import watch_status
from remediate.controller.watch_audit import fix_change, read_events
from remediate.controller.watch_state import WatchState
from remediate.core.watch.policy import Policy
from remediate.fleet.inventory import HostEntry
from remediate.fleet.watch.loop import Watcher
from remediate.models import CommandResult, HostResult
from tests.support.fake_transport import FakeTransport
from tests.support.hosts import watched_host
from tests.support.watch_fleet import NOW, OOM, Fleet, Gate, Unit
from tests.support.watch_fleet import fixed as _fixed
from tests.support.watch_fleet import watcher as _watcher


def _events(directory: Path, kind: str) -> list[dict[str, object]]:
    return [e for e in read_events(directory) if e["event"] == kind]


class Host:
    """A host whose engine units detection finds (templates/probe.sh.j2's ``@@units``), each its own Unit."""

    def __init__(self, name: str, units: list[str]) -> None:
        self.name, self.units = name, {u: Unit(u) for u in units}
        self.listings = 0

    def listing(self, command: str, stdin: str | None) -> CommandResult:
        self.listings += 1
        return CommandResult(command, 0, f"@@now {NOW}\n@@analyze 1\n@@units {' '.join(self.units)}\n@@end\n", "")

    def connect(self, entry: HostEntry) -> FakeTransport:
        return FakeTransport(host=entry.name).on(r"remediate probe", self.listing).on(r"systemctl show", self.show)

    def show(self, command: str, stdin: str | None) -> CommandResult:
        return self.units[command.split()[2]].answer(command, stdin)  # `systemctl show UNIT …`: that unit's


def _watch(tmp_path: Path, hosts: list[Host], fix: object, warned: list[str]) -> Watcher:
    entries = [HostEntry(name=h.name, address="127.0.0.1") for h in hosts]  # no unit named
    by_name = {h.name: h for h in hosts}

    def diagnose(transport: object, entry: HostEntry) -> HostResult:
        return HostResult(host=entry.name, outcome="diagnosed", findings=tuple({"kind": k} for k in OOM))

    return Watcher(entries, lambda e: by_name[e.name].connect(e), diagnose, fix, WatchState(tmp_path),  # type: ignore[arg-type]
                   Policy(breaker_percentage=None), warn=warned.append)  # fmt: skip


def test_each_hosts_engine_units_are_found_and_watched(tmp_path: Path) -> None:
    """A vLLM host, an sglang host running two instances under names of its own, a host running none."""
    vllm = Host("gpu-0", ["vllm.service"])
    two = Host("gpu-1", ["llm-a.service", "llm-b.service"])
    bare = Host("gpu-2", [])
    fixed: list[tuple[str, str]] = []

    def fix(entry: HostEntry) -> HostResult:
        fixed.append((entry.name, str(entry.settings["unit"])))
        return HostResult(host=entry.name, outcome="remediated")

    warned: list[str] = []
    watcher = _watch(tmp_path, [vllm, two, bare], fix, warned)
    watcher.round(NOW)
    assert sorted(watcher.host_states()) == ["gpu-0 vllm.service", "gpu-1 llm-a.service", "gpu-1 llm-b.service",
                                             "gpu-2 "]  # fmt: skip
    assert watcher.host_states()["gpu-2 "] == "no_unit"
    assert [u.polls for u in (*vllm.units.values(), *two.units.values())] == [1, 1, 1], "each unit polled"
    (missing,) = _events(tmp_path, "no_unit")
    assert missing["host"] == "gpu-2" and "no systemd unit runs sglang or vLLM" in str(missing["reason"])
    assert warned == [f"gpu-2: nothing watched: {missing['reason']}"]
    assert not _events(tmp_path, "units_found"), "units found at the first look: silent, as a healthy poll"

    two.units["llm-b.service"].crash(NOW + 5)
    vllm.units["vllm.service"].crash(NOW + 5)
    watcher.round(NOW + 10)
    for at in (NOW + 10, NOW + 11):  # one fix at a time, each on the pool: the second waits for the first's end
        watcher._reap(at, wait=30, every=True)
        watcher.round(at + 0.5)
    watcher._reap(NOW + 12, wait=30, every=True)
    assert sorted(fixed) == [("gpu-0", "vllm.service"), ("gpu-1", "llm-b.service")], "the crashed unit fixed"
    assert {(e["host"], e["unit"]) for e in _events(tmp_path, "detected")} == {
        ("gpu-0", "vllm.service"), ("gpu-1", "llm-b.service")}  # fmt: skip

    # The bare host is looked at again only after its backoff, and said once while the reason holds.
    assert bare.listings == 1 and vllm.listings == 1
    watcher.round(NOW + 20)
    assert bare.listings == 1
    watcher.round(NOW + 31)
    assert bare.listings == 2 and len(_events(tmp_path, "no_unit")) == 1 and len(warned) == 1
    status = watch_status(str(tmp_path))
    assert status["hosts"]["gpu-2"] == "no_unit" and "no systemd unit" in status["no_unit"]["gpu-2"]

    bare.units["sglang.service"] = Unit("sglang.service")  # a person installs the engine: found at the next look
    watcher.round(NOW + 200)
    assert [e["units"] for e in _events(tmp_path, "units_found")] == [["sglang.service"]]
    assert watcher.host_states()["gpu-2 sglang.service"] == "healthy"
    status = watch_status(str(tmp_path))
    assert status["hosts"]["gpu-2"] == "healthy" and status["no_unit"] == {}
    watcher.close()
    watcher.state.close()


def test_a_named_unit_that_does_not_exist_is_not_polled_as_inactive(tmp_path: Path) -> None:
    def missing(command: str, stdin: str | None) -> CommandResult:
        out = "LoadState=not-found\n@@load\nActiveState=inactive\nSubState=dead\nResult=success\n@@journal\n"
        return CommandResult(command, 0, out, "")

    entry = HostEntry(name="h1", address="127.0.0.1", settings={"unit": "sglang.service"})
    warned: list[str] = []
    watcher = Watcher([entry], lambda e: watched_host(e.name, missing),  # type: ignore[arg-type]
                      lambda t, e: HostResult(host=e.name), _fixed([]), WatchState(tmp_path), Policy(),
                      warn=warned.append)  # fmt: skip
    watcher.round(NOW)
    watcher.round(NOW + 100)
    (event,) = _events(tmp_path, "no_unit")
    assert event["unit"] == "sglang.service" and "not found (LoadState=not-found)" in str(event["reason"])
    assert watcher.host_states() == {"h1 sglang.service": "no_unit"} and len(warned) == 1
    watcher.close()
    watcher.state.close()


def test_the_outcome_record_says_what_the_fix_changed(tmp_path: Path) -> None:
    fleet = Fleet(["h1", "h2", "h3"])

    def fix(entry: HostEntry) -> HostResult:
        fleet.units[entry.name].restarted()
        return HostResult(host=entry.name, outcome="remediated", changed=True, backup="/etc/x.bak.oom.1",
                          flags_before={"--mem-fraction-static": "0.94", "--chunked-prefill-size": None},
                          flags_after={"--mem-fraction-static": "0.88", "--chunked-prefill-size": "4096"},
                          env_after={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                          max_total_num_tokens=195011)  # fmt: skip

    watcher = _watcher(tmp_path, fleet, Policy(breaker_percentage=None), fix)
    watcher.round(NOW)
    fleet.units["h1"].crash(NOW + 5)
    watcher.round(NOW + 10)
    watcher._reap(NOW + 10, wait=30, every=True)  # the fix on the pool: the next round records its end
    (outcome,) = _events(tmp_path, "outcome")
    assert outcome["flags"] == {
        "before": {"--mem-fraction-static": "0.94", "--chunked-prefill-size": None},
        "after": {"--mem-fraction-static": "0.88", "--chunked-prefill-size": "4096"},
    }
    assert outcome["env"]["after"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # type: ignore[index]
    assert outcome["tokens"] == 195011 and outcome["backup"] == "/etc/x.bak.oom.1"
    watcher.close()
    watcher.state.close()


def test_a_dead_watchers_fix_is_recovered_though_its_pid_is_this_ones(tmp_path: Path) -> None:
    """Two watchers of one PID (here: one process; in containers: PID 1 each). The first dies with its fix
    in flight; the second, another instance, recovers it once. Keyed by the PID it never would."""
    fleet = Fleet(["h1", "h2", "h3"])
    gate = Gate()
    first = _watcher(tmp_path, fleet, Policy(concurrency=2, breaker_percentage=None), gate.fix)
    first.round(NOW)
    fleet.units["h1"].crash(NOW + 5)
    first.round(NOW + 10)
    gate.wait_started(1)
    assert first.state.acting(str(first.state.incidents()[0]["id"])) == first.instance
    # "Killed": never reaped, never closed (its state's connection dropped, as the kernel would).
    first.state.close()

    fixes: list[str] = []
    second = _watcher(tmp_path, fleet, Policy(breaker_percentage=None), _fixed(fixes, fleet))
    assert second.instance != first.instance
    second.round(NOW + 20)
    second.round(NOW + 30)
    assert fixes == ["h1"], "recovered, once"
    (recovered,) = _events(tmp_path, "recovered")
    assert recovered["acting"] == first.instance and recovered["step"] == "recheck"
    assert second.state.incidents()[0]["outcome"] == "remediated"
    gate.release("h1")
    assert first._pool is not None
    first._pool.shutdown(wait=True)
    second.close()
    second.state.close()


def test_a_fix_a_person_rolled_back_since_is_never_redone(tmp_path: Path, txlog: Path) -> None:
    state = WatchState(tmp_path)
    from remediate.core.watch.incident import Incident

    state.save_incident(Incident("inc1", "h1", "sglang.service", NOW, NOW, 1, OOM), "remediating")
    state.set_acting("inc1", "a-dead-watcher")
    state.close()
    stamp = "2027-01-15T08:00:00Z"  # NOW
    records = [("h1", "sglang.service", "committed"), ("h1", "other.service", "committed"),
               ("h1", "sglang.service", "committed"), ("h1", "sglang.service", "restored")]  # fmt: skip
    txlog.write_text(
        "".join(json.dumps({"time": stamp, "host": h, "unit": u, "event": e}) + "\n" for h, u, e in records)
    )
    fixes: list[str] = []
    fleet = Fleet(["h1"])
    watcher = _watcher(tmp_path, fleet, Policy(), _fixed(fixes))
    watcher._recover(NOW + 5)
    assert fixes == [], "a person's rollback since the fix: not made again"
    (outcome,) = _events(tmp_path, "outcome")
    assert outcome["outcome"] == "rolled_back_by_person"
    (recovered,) = _events(tmp_path, "recovered")
    assert recovered["logged"] == ["committed", "committed", "restored"], "the other unit's records left out"
    row = watcher.state.incidents()[0]
    assert row["closed"] == 1 and row["outcome"] == "rolled_back_by_person"
    watcher.close()
    watcher.state.close()


@pytest.mark.parametrize("name", ["all", "gpu-*", "gpus"])
def test_the_fix_acts_on_the_host_as_polled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The inventory re-addressed since the poll, the host named like a fleet selector (``all``, a glob, a
    group): the fix connects to the polled address of that one host, nowhere else."""
    from remediate.api.watch import WatchRequest, _fix
    from remediate.errors import ConnectError
    from remediate.transport.base import SSHOptions, Transport

    monkeypatch.setenv("REMEDIATE_STATE_DIR", str(tmp_path / "controller"))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  gpu-1: {address: 127.0.0.2}\n  gpu-2: {address: 127.0.0.3}\n"
                         "groups:\n  gpus: [gpu-1, gpu-2]\n")  # fmt: skip
    seen: list[tuple[str, str]] = []

    def refused(command: str, stdin: str | None) -> CommandResult:
        raise ConnectError("the host", "refused (the test's)")

    def factory(entry: HostEntry, ssh: SSHOptions) -> Transport:
        seen.append((entry.name, entry.address))
        return FakeTransport(host=entry.name).on("", refused)

    polled = HostEntry(name=name, address="127.0.0.9", settings={"unit": "vllm.service"})
    result = _fix(WatchRequest(inventory=str(inventory)), Policy(), factory)(polled)
    assert seen == [(name, "127.0.0.9")], seen
    assert result.host == name and result.outcome == "unreachable"


def test_the_change_of_a_fix_over_several_units_names_each_units_flags() -> None:
    """A fix of a host with several units: the outcome's change lists each unit's flags before → after (the
    names as the result has them), never a ``flags: null`` read off an attribute the result lacks."""
    fraction = "mem_fraction_static"
    one = HostResult(host="h1", unit="a.service", outcome="remediated", changed=True,
                     flags_before={fraction: "0.94"}, flags_after={fraction: "0.93"})  # fmt: skip
    other = HostResult(host="h1", unit="b.service", outcome="unchanged", flags_before={"mem_fraction_static": "0.9"})
    change = fix_change(HostResult(host="h1", outcome="remediated", units=[one, other]))
    assert change["units"]["a.service"]["flags"] == {
        "before": {"mem_fraction_static": "0.94"},
        "after": {"mem_fraction_static": "0.93"},
    }
    assert change["units"]["b.service"]["flags"]["before"] == {"mem_fraction_static": "0.9"}
    assert fix_change(one)["flags"]["after"] == {"mem_fraction_static": "0.93"} and fix_change(one)["changed"] is True
