"""Unit tests of the pieces: systemd and shell word splitting, env files, flags, reports, validation."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from remediate.core.unitfile.argv import find_in_exec, resolve_flag
from remediate.core.unitfile.edit import (
    DesiredState,
    SourceFile,
    UnitSources,
    find_server_exec,
    plan_edit,
    read_settings,
    runs_sglang,
    validate_desired,
)
from remediate.core.unitfile.envfile import parse_env_file
from remediate.core.unitfile.execline import parse_exec, quote_word, split_words
from remediate.core.unitfile.model import MappedText, TextEdit, apply_edits, parse_unit
from remediate.core.unitfile.report import mask_secrets, plan_to_dict, summary_lines, unified_diff
from remediate.core.unitfile.shellwords import split_shell
from remediate.errors import ConfigError

NOW = datetime(2026, 11, 29, 7, 14, 22, tzinfo=UTC)


def test_systemd_escapes_and_quotes() -> None:
    words = split_words(r'a\x41\101\u0042\U00000043\s "b c"d \q \n' + "\\")
    assert [w.text for w in words] == ["aAABC ", "b cd", "q", "\n"]
    assert words[1].quoted and words[1].raw == '"b c"d'


def test_exec_prefix_vars_and_specifiers() -> None:
    line = parse_exec("-@/bin/py argv0 $FOO ${BAR}x %i")
    assert line.prefix == "-@" and line.has_argv0_override
    assert line.program is not None and line.program.text == "/bin/py"
    assert [w.text for w in line.args] == ["$FOO", "${BAR}x", "%i"]
    assert line.args[0].split_var == "FOO" and line.args[1].braced_vars == ["BAR"]
    assert parse_exec("").program is None


def test_quote_word() -> None:
    assert quote_word("--port") == "--port"
    assert quote_word('a b"\\$\t\n') == '"a b\\"\\\\$$\\t\\n"'
    assert quote_word("") == '""'


def test_shell_tokens() -> None:
    src = MappedText.identity('A=1 exec py \'x y\' "a\\"b" c\\ d e\\\nf # comment\nnext && z')
    tokens = [t.text for t in split_shell(src)]
    assert tokens == ["A=1", "exec", "py", "x y", 'a"b', "c d", "ef", "\n", "next", "&&", "z"]


def test_flag_prefixes() -> None:
    assert resolve_flag("mem-frac") == "mem-fraction-static"
    assert resolve_flag("max-prefill") == "max-prefill-tokens"
    assert resolve_flag("cuda-graph-max-bs") == "cuda-graph-max-bs"
    assert resolve_flag("cuda-graph-max-bs-") is None  # ambiguous
    assert resolve_flag("tp") == "tp-size"


@pytest.mark.parametrize(
    "value",
    [
        "/usr/bin/python3 -u -X dev -m sglang.launch_server --port 1",
        "python3 -msglang.launch_server --port 1",
        "nerdctl --host x run -d img python3 -m sglang.launch_server",
        "/bin/sh -ec 'nohup env -u X A=1 python3 -m sglang.launch_server --port 1'",
    ],
)
def test_find_sglang_variants(value: str) -> None:
    assert find_in_exec(value) is not None


@pytest.mark.parametrize(
    "value",
    [
        "python3 -m vllm.entrypoints",
        "python3 -m",
        "python3 -c 'import sglang'",
        "docker ps",
        "docker run img",
        "docker run -e",
        "bash script.sh",
        "bash -c",
        "bash -c 'echo hi; true'",
        "env A=1",
        "env A=1 true",
        "sglang version",
    ],
)
def test_not_sglang(value: str) -> None:
    assert find_in_exec(value) is None


def test_env_file_forms() -> None:
    text = (
        'export A="x \\" \\$ \\\ny"\n  B = plain value  \nC=\'q\'"r" \nbad line\n'
        '; c \\\n  D=no\nE=a\\ b\\\nc\n1X=2\nF="unterminated'
    )
    env = parse_env_file(text)
    values = {a.name: a.value.text for a in env.assignments}
    assert values == {"A": 'x " $ y', "B": "plain value", "C": "qr", "E": "a bc", "F": "unterminated"}
    assert env.get("Z") is None


def test_model_helpers() -> None:
    unit = parse_unit("[Service]\nExecStart=a \\\n")
    assert unit.directives[0].value.text == "a"
    assert unit.position(3) == (1, 4) and unit.line_at(12).number == 2
    assert parse_unit("").eol == "\n"
    assert apply_edits("abcdef", [TextEdit(1, 3, ""), TextEdit(2, 4, "")]) == "aef"
    with pytest.raises(ValueError):
        apply_edits("abcdef", [TextEdit(1, 3, "x"), TextEdit(2, 4, "y")])


@pytest.mark.parametrize(
    "desired",
    [
        DesiredState(mem_fraction_static=Decimal("1")),
        DesiredState(mem_fraction_static=Decimal("0")),
        DesiredState(mem_fraction_static=Decimal("NaN")),
        DesiredState(mem_fraction_step=Decimal("0")),
        DesiredState(chunked_prefill_size=0),
        DesiredState(chunked_prefill_size=-2),
        DesiredState(alloc_conf="expandable_segments"),
        DesiredState(alloc_conf="a:b,,c:d"),
    ],
)
def test_validate_desired_rejects(desired: DesiredState) -> None:
    with pytest.raises(ConfigError):
        validate_desired(desired)


def _unit(exec_line: str, extra: str = "") -> UnitSources:
    return UnitSources(SourceFile("/u.service", f"[Service]\n{extra}ExecStart={exec_line}\n"))


@pytest.mark.parametrize(
    ("exec_line", "message"),
    [
        ("python3 -m sglang.launch_server --mem-fraction-static abc", "is not a number"),
        ("python3 -m sglang.launch_server --mem-fraction-static 0.9 --chunked-prefill-size x", "not an integer"),
        ("python3 -m sglang.launch_server --mem-fraction-static ${FRAC}", "comes from $FRAC"),
        ("python3 -m sglang.launch_server --mem-fraction-static 0.9 $ARGS", "$ARGS set in EnvironmentFile=/e"),
    ],
)
def test_plan_errors(exec_line: str, message: str) -> None:
    sources = _unit(exec_line, "EnvironmentFile=/e\n")
    with pytest.raises(ConfigError) as info:
        plan_edit(sources, DesiredState(), now=NOW)
    assert message in str(info.value)


def test_missing_required_env_file() -> None:
    sources = UnitSources(
        SourceFile("/u", "[Service]\nEnvironmentFile=/e\nExecStart=python3 -m sglang.launch_server\n"), (), {}
    )
    with pytest.raises(ConfigError, match="EnvironmentFile=/e does not exist"):
        read_settings(sources)


def test_explicit_fraction_added_when_absent_and_unset_var() -> None:
    sources = _unit("python3 -m sglang.launch_server $UNSET --port 1")
    plan = plan_edit(sources, DesiredState(mem_fraction_static=Decimal("0.8")), now=NOW)
    assert plan.after.mem_fraction_static == "0.8"
    assert "mem-fraction-static unset->0.8" in plan.files[0].new_text


def test_env_files_unreadable_alloc_note_and_known_var() -> None:
    sources = UnitSources(
        SourceFile(
            "/u",
            "[Service]\nEnvironmentFile=-/e\nEnvironment=ARGS=--mem-fraction-static=0.9\n"
            "ExecStart=python3 -m sglang.launch_server $ARGS\n",
        ),
        (),
        None,
    )
    plan = plan_edit(sources, DesiredState(), now=NOW)
    assert plan.after.mem_fraction_static == "0.89"
    assert any("not read" in note for note in plan.notes)


def test_marker_elsewhere_is_moved() -> None:
    text = (
        "[Service]\n# remediate: oom 2026-01-01T00:00:00Z mem-fraction-static 0.5->0.4\n"
        "Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
        "ExecStart=python3 -m sglang.launch_server --mem-fraction-static 0.9 --chunked-prefill-size 4096\n"
    )
    plan = plan_edit(UnitSources(SourceFile("/u", text)), DesiredState(), now=NOW)
    new = plan.files[0].new_text
    assert new.count("# remediate: oom") == 1
    assert "0.9->0.89\nExecStart=" in new


def test_helpers_and_reports() -> None:
    sources = _unit("python3 -m sglang.launch_server --mem-fraction-static 0.9", "Environment=HF_TOKEN=abc\n")
    assert runs_sglang(sources.fragment.text) and not runs_sglang("[Service]\nExecStart=/bin/true\n")
    path, number, command = find_server_exec(sources)
    assert (path, number, command.kind) == ("/u.service", 3, "ExecStart=")
    plan = plan_edit(sources, DesiredState(), now=NOW)
    assert summary_lines(plan)[0] == "--mem-fraction-static 0.9 → 0.89 (ExecStart=)"
    data = plan_to_dict(plan)
    assert data["changed"] and "abc" not in str(data) and data["after"]["mem_fraction_static"] == "0.89"
    assert unified_diff("/x", "a", "b").endswith("\\ No newline at end of file\n")


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ('Environment="A_TOKEN=x y" B=1', 'Environment="A_TOKEN=***" B=1'),
        ("API_KEY='x y' z", "API_KEY='***' z"),
        ("docker run --env=MY_SECRET=s -e db_password=p", "docker run --env=MY_SECRET=*** -e db_password=***"),
        ("--hf-token=abc --tokenizer-path /t", "--hf-token=*** --tokenizer-path /t"),
        ("KEYS=1 MONKEY=2", "KEYS=1 MONKEY=2"),
    ],
)
def test_mask_secrets(text: str, masked: str) -> None:
    assert mask_secrets(text) == masked
