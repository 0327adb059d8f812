"""The resolution of a fix left ``remediating`` by a dead watcher: read back, re-checked, never redone."""

from __future__ import annotations

import pytest

from remediate.core.watch.incident import (
    backup_to_restore,
    committed_backups,
    recovered_outcome,
    recovery,
    undone_on_host,
)


def test_the_instance_not_the_pid_tells_a_dead_watchers_fix() -> None:
    """Two watchers as PID 1 of their containers: the same PID, other instances; the dead one's fix is recovered."""
    assert recovery("1", "1", ("committed",)) == "none"  # what a PID key did: a restarted PID 1 never recovered
    assert recovery("a3f0c2", "9b1e77", ("committed",)) == "recheck"


@pytest.mark.parametrize(
    "logged", [("committed", "restored"), ("committed", "remediated", "committed", "restored"), ("restored",)]
)
def test_a_persons_rollback_since_the_fix_is_never_redone(logged: tuple[str, ...]) -> None:
    assert recovery("w41", "w42", logged) == "rolled_back_by_person"
    assert recovered_outcome("rolled_back_by_person") == "rolled_back_by_person"


def test_this_watchers_own_fix_is_left_alone() -> None:
    assert recovery("w41", "w41", ()) == "none"
    assert recovery("w41", "w41", ("committed",)) == "none"


@pytest.mark.parametrize("end", ["rolled_back", "failed"])
def test_a_logged_end_is_taken_as_it_is(end: str) -> None:
    assert recovery("w41", "w42", ("committed", end)) == end
    assert recovery(None, "w42", (end,)) == end


@pytest.mark.parametrize(
    "logged", [(), ("committed",), ("committed", "unknown"), ("committed", "remediated"), ("committed", "drift")]
)
def test_anything_else_is_rechecked_by_the_same_transaction(logged: tuple[str, ...]) -> None:
    assert recovery("w41", "w42", logged) == "recheck"
    assert recovery(None, "w42", logged) == "recheck"


@pytest.mark.parametrize(
    ("recheck", "outcome"),
    [
        ("unchanged", "remediated"),  # the killed fix had finished: the re-run changes nothing
        ("drift", "remediated"),  # the unit was changed, the server not restarted: restarted and verified
        ("remediated", "remediated"),  # the killed fix never committed: this is its one commit
        ("rolled_back", "rolled_back"),
        ("failed", "failed"),
        ("unreachable", "failed"),
        ("restored", "failed"),
    ],
)
def test_the_recheck_outcome(recheck: str, outcome: str) -> None:
    assert recovered_outcome(recheck) == outcome


KILLED = (("committed", ("/etc/systemd/system/sglang.service.bak.oom.1",)),)


def test_a_failed_recheck_restores_the_killed_commits_backup() -> None:
    again = (("committed", ()), ("failed", ()))  # the re-run: nothing to write, the server still dies
    assert backup_to_restore("failed", KILLED + again) == "/etc/systemd/system/sglang.service.bak.oom.1"


@pytest.mark.parametrize("recheck", ["unchanged", "drift", "remediated", "rolled_back"])
def test_a_recheck_that_holds_or_undid_itself_restores_nothing(recheck: str) -> None:
    assert backup_to_restore(recheck, KILLED) is None


def test_killed_while_the_host_committed_restores_the_backup_written_ahead() -> None:
    """The controller killed after its ``committing`` record, before the commit's report came back: the host
    made the change (and its backup) all the same; the re-run finds nothing to write and the server dies."""
    ahead = (("committing", ("/etc/systemd/system/sglang.service.bak.oom.1",)),)
    again = (("committing", ("/etc/systemd/system/sglang.service.bak.oom.2",)), ("committed", ()), ("failed", ()))
    assert backup_to_restore("failed", ahead + again) == "/etc/systemd/system/sglang.service.bak.oom.1"
    reported = (("committing", ("/etc/x.bak.oom.1",)), ("committed", ("/etc/x.bak.oom.1.1",)))
    assert backup_to_restore("failed", reported) == "/etc/x.bak.oom.1.1", "the name the commit reported wins"
    assert committed_backups(reported, ("/etc/x",)) == {"/etc/x": "/etc/x.bak.oom.1.1"}


def test_nothing_committed_nothing_to_restore() -> None:
    assert backup_to_restore("failed", ()) is None
    assert backup_to_restore("failed", (("committed", ()),)) is None


UNIT_FILE = "/etc/systemd/system/sglang.service"
BACKUP = f"{UNIT_FILE}.bak.oom.1800000000"


def test_the_fixs_files_pair_with_the_backups_its_commit_made() -> None:
    logged = (("committed", (BACKUP, "/etc/other.conf.bak.oom.1")), ("remediated", ()))
    assert committed_backups(logged, (UNIT_FILE,)) == {UNIT_FILE: BACKUP}
    assert committed_backups((("started", ()),), (UNIT_FILE,)) == {}, "nothing committed: nothing to compare"


@pytest.mark.parametrize(
    ("sums", "undone"),
    [
        ({UNIT_FILE: "aa", BACKUP: "aa"}, True),  # the unit holds its pre-fix bytes again: someone rolled it back
        ({UNIT_FILE: "bb", BACKUP: "aa"}, False),  # the fix's bytes (or another's): not undone
        ({UNIT_FILE: "-", BACKUP: "-"}, False),  # unreadable: not known
        ({}, False),
    ],
)
def test_a_unit_back_on_its_backups_bytes_was_rolled_back(sums: dict[str, str], undone: bool) -> None:
    assert undone_on_host({UNIT_FILE: BACKUP}, sums) is undone
    assert undone_on_host({}, sums) is False
