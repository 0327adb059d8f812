"""Property: unit names, paths and values full of shell metacharacters reach the remote shell only
as data. The rendered commit and backups scripts are run by bash against a temporary directory; every
file lands where named, nothing else is created or executed, and the framed output parses back to the
same paths. Values inside scripts round-trip through shlex."""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remediate.core.probe import parse_probe
from remediate.host.common import templates
from remediate.host.common.commit import FileWrite
from remediate.host.common.environ import environ_script
from remediate.host.common.listener import listener_script
from remediate.host.common.lock import LOCK_DIR
from remediate.host.common.probe import probe_script

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
        listed = parse_probe(out, None).files
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


# -- every template, executed: hostile values are data, never commands --------------------------------

# What a hostile unit name or path would hold to run a command as root; relative, so it lands in the cwd.
PAYLOADS = (
    "$(touch PWNED)",
    "`touch PWNED`",
    "'; touch PWNED; '",
    '"; touch PWNED; "',
    "\n touch PWNED\n",
    "${x:-$(touch PWNED)}",
)
HOSTILE = st.tuples(st.sampled_from(PAYLOADS), NAMES).map(lambda pair: pair[1] + pair[0])
TEMPLATE_DIR = templates._template_dir()
COVERED = {
    "commit.sh.j2",
    "backups.sh.j2",
    "prune.sh.j2",
    "probe.sh.j2",
    "_flock.sh.j2",
    "_safedir.sh.j2",
    "_readfile.sh.j2",
    "listener.sh.j2",
    "environ.sh.j2",
    "units.sh.j2",
    "instances.sh.j2",
    "_environ.sh.j2",
}  # macros via the others
# systemd and the GPU tools as scripts that answer and touch nothing (the scratch host has neither).
_TOOL_SHIMS = {
    "systemctl": 'case "$*" in *NeedDaemonReload*) echo NeedDaemonReload=no;; esac',
    "journalctl": "",
    "nvidia-smi": "",
    "logger": "",
    "systemd-cat": "cat >/dev/null",
    "ss": "",
}


def test_every_template_is_covered_by_the_hostile_runs() -> None:
    assert {p.name for p in TEMPLATE_DIR.glob("*.j2")} == COVERED, "a new template needs a hostile run below"


# What may be printed into a script unquoted: a macro's output (checked in its own template) and lock_word,
# shell text the caller built from quoted parts (``lock_dir | q ~ '/"$unit".lock'``).
_PRE_QUOTED = {"lock_word"}


def _is_integer(node: jinja2.nodes.Node) -> bool:
    """``x | int``, an integer literal, or arithmetic of those (``smi_timeout | int + 4``)."""
    if isinstance(node, jinja2.nodes.Filter):
        return node.name == "int"
    if isinstance(node, jinja2.nodes.Const):
        return type(node.value) is int
    if isinstance(node, (jinja2.nodes.Add, jinja2.nodes.Sub, jinja2.nodes.Mul)):
        return _is_integer(node.left) and _is_integer(node.right)
    return False


def _unquoted_outputs(source: str) -> list[str]:
    """Each ``{{ … }}`` of a template whose value is neither shell-quoted (``| q``) nor an ``| int``."""
    env = templates.environment()
    bad = []
    for output in env.parse(source).find_all(jinja2.nodes.Output):
        for node in output.nodes:
            if isinstance(node, jinja2.nodes.TemplateData):
                continue
            if (isinstance(node, jinja2.nodes.Filter) and node.name == "q") or _is_integer(node):
                continue
            if isinstance(node, jinja2.nodes.Call) or (
                isinstance(node, jinja2.nodes.Name) and node.name in _PRE_QUOTED
            ):
                continue
            bad.append(f"line {node.lineno}: {source.splitlines()[node.lineno - 1].strip()}")
    return bad


def test_every_value_in_every_template_is_quoted_or_an_integer() -> None:
    """Static twin of the hostile runs: a value they do not vary (systemctl's property list) is quoted too."""
    bad = {p.name: found for p in TEMPLATE_DIR.glob("*.j2") if (found := _unquoted_outputs(p.read_text()))}
    assert bad == {}
    assert _unquoted_outputs("x={{ name }}\n") == ["line 1: x={{ name }}"]  # the check sees one


def _scratch_bash(script: str, cwd: Path) -> tuple[int, str, str]:
    """bash -n, then run ``script`` in ``cwd`` with systemd's tools shimmed; PWNED must never appear."""
    assert _bash(script, "-n")[0] == 0
    shims = cwd / ".shims"
    shims.mkdir(exist_ok=True)
    for tool, body in _TOOL_SHIMS.items():
        (shims / tool).write_text(f"#!/bin/sh\n{body}\nexit 0\n")
        (shims / tool).chmod(0o755)
    env = {"PATH": f"{shims}:/usr/bin:/bin", "HOME": str(cwd)}
    done = subprocess.run(
        ["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, cwd=cwd, timeout=30, env=env, check=False
    )
    assert not list(cwd.rglob("PWNED")), "an injected command ran"
    return done.returncode, done.stdout.decode("utf-8", "surrogateescape"), done.stderr.decode("utf-8", "replace")


@needs_tools
@HYPOTHESIS
@given(name=HOSTILE, unit=HOSTILE, journal=HOSTILE)
def test_commit_with_restart_runs_hostile_names_as_data(name: str, unit: str, journal: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = root / "units" / (name.replace("/", "_") + ".service")
        target.parent.mkdir()
        old = _unit(name)
        target.write_text(old)
        write = FileWrite(str(target), old, _unit(name + "x"))
        run_dir = root / "run"
        run_dir.mkdir()
        script = templates.render(
            "commit.sh.j2",
            unit=unit,
            files=[write.render_args()],
            epoch=EPOCH,
            restart=True,
            analyze=True,
            log_path=f"{run_dir}/{unit.replace('/', '_')}.commit.log",
            commit_lock=f"{run_dir}/lock.commit",
            journal=journal,
        )
        code, out, err = _scratch_bash(script, root)
        assert code == 0, out + err
        assert target.read_text() == _unit(name + "x")


@needs_tools
@HYPOTHESIS
@given(names=st.lists(HOSTILE, min_size=1, max_size=3, unique=True), unit=HOSTILE)
def test_prune_deletes_hostile_backup_paths_and_runs_nothing(names: list[str], unit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "units").mkdir()
        doomed = []
        for name in names:
            backup = root / "units" / f"{name.replace('/', '_')}.service.bak.oom.{EPOCH}"
            backup.write_text(_unit(name))
            doomed.append({"path": str(backup), "sha256": hashlib.sha256(_unit(name).encode()).hexdigest()})
        script = templates.render(
            "prune.sh.j2",
            unit=unit,
            lock_dir=f"{root}/run",
            lock_wait=3,
            backups=doomed,
            directory=str(root / "units"),
        )
        code, out, err = _scratch_bash(script, root)
        assert code == 0, err
        assert not list((root / "units").iterdir())
        assert out.count("@@deleted ") == len(doomed)
        if not any("\n" in n for n in names):  # a line-framed report: a newline in a name splits its line
            assert {line.removeprefix("@@deleted ") for line in out.split("\n") if line.startswith("@@deleted ")} == {
                d["path"] for d in doomed
            }


@needs_tools
@HYPOTHESIS
@given(unit=HOSTILE, extra=HOSTILE, since=HOSTILE, locked=st.booleans())
def test_probe_runs_hostile_values_as_data(unit: str, extra: str, since: str, locked: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lock = {"lock_dir": str(root / "run"), "lock_wait": 3} if locked else {}
        script = probe_script(
            unit, (f"{root}/{extra.replace('/', '_')}",), journal_lines=5, journal_since=since, **lock
        )
        code, out, err = _scratch_bash(script, root)  # stdin at EOF: the locked read lets go at once
        assert code == 0, err
        assert "@@end" in out
        if locked:
            assert {p.name for p in (root / "run").iterdir()} >= {f"{unit}.lock"}


@needs_tools
@HYPOTHESIS
@given(template=HOSTILE, pattern=HOSTILE)
def test_instances_listing_runs_hostile_names_as_data(template: str, pattern: str) -> None:
    """oom --all-instances: the template's lock and its instances' listing (stdin at EOF: it lets go at once)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script = templates.render(
            "instances.sh.j2", template=template, pattern=pattern, lock_dir=str(root / "run"), lock_wait=3
        )
        code, out, err = _scratch_bash(script, root)
        assert code == 0, err
        assert out.splitlines()[0] == "@@locked" and out.splitlines()[-1] == "@@end"
        assert {p.name for p in (root / "run").iterdir()} == {f"{template}.lock"}


@needs_tools
@HYPOTHESIS
@given(names=st.lists(HOSTILE, min_size=1, max_size=3, unique=True))
def test_backups_listing_runs_hostile_paths_as_data(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = []
        for name in names:
            unit = root / (name.replace("/", "_") + ".service")
            unit.write_text(_unit(name))
            Path(f"{unit}.bak.oom.{EPOCH}").write_text(_unit("old"))
            files.append(str(unit))
        code, out, err = _scratch_bash(templates.render("backups.sh.j2", files=files), root)
        assert code == 0, err
        assert out.count("@@file ") == len(files)


@needs_tools
@HYPOTHESIS
@given(unit=HOSTILE, port=st.integers(min_value=1, max_value=65535), environ=st.booleans())
def test_listener_check_runs_a_hostile_unit_name_as_data(unit: str, port: int, environ: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = listener_script(unit, port, environ=environ)
        code, out, _err = _scratch_bash(script, Path(tmp))
        assert code == 0
        # with the environ read: the shim knows no MainPID, so nothing follows its @@main 0
        assert out.splitlines()[-2:] == (["@@end", "@@main 0"] if environ else [out.splitlines()[-2], "@@end"])


@needs_tools
@HYPOTHESIS
@given(unit=HOSTILE)
def test_environ_read_runs_a_hostile_unit_name_as_data(unit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        code, out, _err = _scratch_bash(environ_script(unit), Path(tmp))
        assert code == 0
        assert out.splitlines() == ["@@main 0"]  # the shim knows no MainPID: nothing else is read


@needs_tools
@HYPOTHESIS
@given(patterns=st.lists(HOSTILE, min_size=1, max_size=3))
def test_units_listing_runs_hostile_patterns_as_data(patterns: list[str]) -> None:
    """templates/units.sh.j2 (a --unit glob's listing): each pattern reaches systemctl as one word."""
    with tempfile.TemporaryDirectory() as tmp:
        code, out, _err = _scratch_bash(templates.render("units.sh.j2", patterns=patterns), Path(tmp))
        assert code == 0
        assert out.splitlines() == ["@@units", "@@files", "@@end"]
