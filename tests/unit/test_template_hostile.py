"""Property: unit names, paths and values full of shell metacharacters reach the remote shell only
as data. The rendered commit and backups scripts are run by bash against a temporary directory; every
file lands where named, nothing else is created or executed, and the framed output parses back to the
same paths. Values inside scripts round-trip through shlex."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remediate.core import probes
from remediate.host import templates
from remediate.host.commit import FileWrite
from remediate.host.lock import LOCK_DIR
from remediate.host.read import probe_script

EPOCH = 1_764_400_000
META = " '\"$`\\;&|<>(){}[]*?!#~%^=,\t:@+"
_NAME_CHARS = st.characters(blacklist_characters="/\x00\n", blacklist_categories=("Cs",))
NAMES = st.one_of(
    st.text(alphabet=st.sampled_from(META + "ab-x."), min_size=1, max_size=24),
    st.text(alphabet=_NAME_CHARS, min_size=1, max_size=24),
).filter(lambda name: name not in (".", "..") and len(name.encode()) < 200)
VALUES = st.text(alphabet=st.one_of(st.sampled_from(META), _NAME_CHARS), max_size=40)
needs_tools = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "flock", "sha256sum", "base64", "mktemp", "sync", "stat")),
    reason="needs bash and coreutils/util-linux",
)
HYPOTHESIS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _unit(value: str) -> str:
    return f"[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --served-model-name {value!r} --x 0.9\n"


def _bash(script: str, *args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run bash on ``script``; output decoded as bytes are (no newline translation: names may hold \\r)."""
    done = subprocess.run(["bash", *args], input=script.encode(), capture_output=True, cwd=cwd, timeout=30)
    return done.returncode, done.stdout.decode("utf-8", "surrogateescape"), done.stderr.decode("utf-8", "replace")


def _tree(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


@needs_tools
@HYPOTHESIS
@given(name=NAMES, value=VALUES, unit=NAMES)
def test_commit_script_writes_hostile_paths_and_runs_nothing(name: str, value: str, unit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as run:
        root = Path(tmp)
        target = root / "units" / (name + ".service")
        target.parent.mkdir()
        old, new = _unit(value), _unit(value + "'; touch PWNED; '")
        target.write_text(old)
        write = FileWrite(str(target), old, new)
        script = templates.render(
            "commit.sh.j2",
            unit=unit,
            files=[write.render_args()],
            epoch=EPOCH,
            restart=False,
            analyze=False,
            log_path=f"{run}/commit.log",  # the lock directory's commit log and commit lock, outside root
            commit_lock=f"{run}/lock.commit",
        )
        code, out, err = _bash(script, "-s", cwd=root)
        assert code == 0, err
        assert target.read_text() == new
        backup = target.with_name(f"{target.name}.bak.oom.{EPOCH}")
        assert backup.read_text() == old
        assert f"@@backup 0 {backup}\n" in out
        expected = {Path("units"), target.relative_to(root), backup.relative_to(root)}
        assert _tree(root) == expected  # no PWNED, no stray temp file


@needs_tools
@HYPOTHESIS
@given(names=st.lists(NAMES, min_size=1, max_size=3, unique=True))
def test_backups_listing_parses_back_hostile_paths(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "etc dir"
        root.mkdir()
        files = []
        for name in names:
            unit = root / (name + ".service")
            unit.write_text(_unit(name))
            Path(f"{unit}.bak.oom.{EPOCH}").write_text(_unit("old " + name))
            files.append(str(unit))
        script = templates.render("backups.sh.j2", files=files)
        code, out, err = _bash(script, "-s")
        assert code == 0, err
        listed = probes.parse_probe(out, None).files
        assert set(listed) == {f"{f}.bak.oom.{EPOCH}" for f in files}
        for name, path in zip(names, files, strict=True):
            assert listed[f"{path}.bak.oom.{EPOCH}"].text == _unit("old " + name)


@HYPOTHESIS
@given(unit=NAMES, extra=NAMES)
def test_probe_and_lock_scripts_quote_every_value(unit: str, extra: str) -> None:
    probe = templates.render(
        "probe.sh.j2",
        unit=unit,
        properties=["FragmentPath"],
        extra_files=["/x/" + extra],
        journal_lines=50,
        journal_since=extra,
    )
    # The locked read (oom, rollback): the same probe, the lock taken after the unit is known.
    lock = probe_script(unit, journal_lines=50, lock_dir=LOCK_DIR, lock_wait=3)
    assert _bash(probe, "-n")[0] == 0
    assert _bash(lock, "-n")[0] == 0
    [assignment] = re.findall(r"^unit=(.*)$", probe, re.MULTILINE)
    assert shlex.split(assignment) == [unit]
    [emit] = [line for line in probe.split("\n") if line.startswith("emit ") and "/x/" in line]
    assert shlex.split(emit) == ["emit", "/x/" + extra]
    [journal] = [line for line in probe.split("\n") if line.startswith("journalctl ")]
    assert shlex.split(journal.split(" 2>")[0])[-2:] == ["--since", extra]
    [taken] = re.findall(r"^lock=(.*)$", lock, re.MULTILINE)
    code, out, _ = _bash(f'unit={assignment}\nlock={taken}\nprintf %s "$lock"', "-s")  # as bash expands it
    assert code == 0 and out == f"{LOCK_DIR}/{unit}.lock"  # lock_path() refuses such names; the template quotes
