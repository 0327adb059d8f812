"""The bad-input corpus (tests/data/unitfile_corpus/, layout as tests/data/unitfile_cases/README.md): real-world
layouts and their hostile neighbours. Each unit is either edited exactly as its golden ``after`` files say, or
refused with one ConfigError line naming the file — never a traceback, never a write — and no secret
listed in ``params.yaml`` (``secrets:``) is ever shown: not in diffs, summaries, notes, JSON or errors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from remediate.cli import cli
from remediate.core.unitfile.edit import plan_edit
from remediate.core.unitfile.report import plan_to_dict, summary_lines, unified_diff
from remediate.errors import ConfigError
from tests.support import unit_cases as golden

CORPUS = Path(__file__).resolve().parents[3] / "data" / "unitfile_corpus"
CASES = golden.load_cases(CORPUS)
EDITED = [case for case in CASES if not case.params.get("expect_error")]
REFUSED = [case for case in CASES if case.params.get("expect_error")]
# Bytes that must never reach a terminal or a log raw.
_RAW_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def test_corpus_size() -> None:
    assert len(CASES) >= 40
    assert len(REFUSED) >= 15 and len(EDITED) >= 40


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_case(case: golden.Case) -> None:
    golden.check_golden_case(case)


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.name)
def test_refusal_is_one_line_naming_the_file(case: golden.Case) -> None:
    sources = case.sources()
    with pytest.raises(ConfigError) as info:
        plan_edit(sources, case.desired(), now=case.now)
    message = str(info.value)
    paths = [s.path for s in sources.unit_files] + list(sources.env_files or {}) + list(sources.config_files or {})
    assert any(message.startswith(f"{path}: ") for path in paths), message
    assert "\n" not in message and not _RAW_CONTROL.search(message)
    for secret in case.params.get("secrets", []):
        assert secret not in message


@pytest.mark.parametrize("case", EDITED, ids=lambda c: c.name)
def test_nothing_secret_or_raw_is_shown(case: golden.Case) -> None:
    plan = plan_edit(case.sources(), case.desired(), now=case.now)
    shown = [unified_diff(f.path, f.old_text, f.new_text) for f in plan.files]
    shown += [json.dumps(plan_to_dict(plan)), *summary_lines(plan), *plan.notes]
    for text in shown:
        assert not _RAW_CONTROL.search(text.replace("\\x00", "")), text
        for secret in case.params.get("secrets", []):
            assert secret not in text


def _stamp(text: bytes) -> bytes:
    """The marker comment's time is the run's: compare everything else."""
    return re.sub(rb"# remediate: oom \S+ ", b"# remediate: oom T ", text)


def _fragment_only(case: golden.Case) -> bool:
    return not any((case.dir / name).exists() for name in ("envfiles", "dropins", "configfiles"))


@pytest.mark.parametrize("case", [c for c in CASES if _fragment_only(c)], ids=lambda c: c.name)
@pytest.mark.parametrize("as_json", [False, True], ids=["human", "json"])
def test_cli_edit_on_the_corpus(case: golden.Case, as_json: bool, tmp_path: Path) -> None:
    """`remediate edit FILE --write`: the golden edit, or exit 2 with one stderr line and the file untouched."""
    path = tmp_path / "sglang.service"
    before = (case.dir / "before.service").read_bytes()
    path.write_bytes(before)
    args = ["edit", str(path), "--write", *(["--json"] if as_json else [])]
    result = CliRunner().invoke(cli, args)
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    if case.params.get("expect_error"):
        assert result.exit_code == 2, output
        assert result.stdout == "" and result.stderr.startswith(f"remediate: {path}: ")
        assert result.stderr.count("\n") == 1
        assert path.read_bytes() == before and sorted(tmp_path.iterdir()) == [path]
    else:
        assert result.exit_code == 0, output
        assert _stamp(path.read_bytes()) == _stamp((case.dir / "after.service").read_bytes())
    assert not _RAW_CONTROL.search(output)
    for secret in case.params.get("secrets", []):
        assert secret not in output
