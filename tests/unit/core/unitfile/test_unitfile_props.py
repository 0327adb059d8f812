"""Property tests: lossless round trip, idempotency, and edits that touch only their own lines."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import example, given, settings
from hypothesis import strategies as st

from remediate.core.unitfile.edit import DesiredState, SourceFile, UnitSources, plan_edit
from remediate.core.unitfile.envfile import parse_env_file
from remediate.core.unitfile.model import parse_unit, render_unit
from remediate.errors import ConfigError

NOW = datetime(2026, 11, 29, 7, 14, 22, tzinfo=UTC)
unit_chars = st.sampled_from(list("[]=#; \t\\\r\n\"'abcXYZ-_.:$%{}01"))


@given(st.text())
def test_round_trip_arbitrary_text(text: str) -> None:
    assert render_unit(parse_unit(text)) == text


@given(st.text(unit_chars))
def test_round_trip_unit_alphabet(text: str) -> None:
    unit = parse_unit(text)
    assert render_unit(unit) == text
    assert "".join(line.content + line.eol for line in unit.lines) == text


@given(st.text(unit_chars))
@example("X=\\")  # a backslash that ends the file: the span ran one past the text
def test_env_file_parser_never_fails(text: str) -> None:
    env = parse_env_file(text)
    for assignment in env.assignments:
        assert 0 <= assignment.span[0] <= assignment.span[1] <= len(text)


FLAG_FORMS = st.sampled_from(["--mem-fraction-static {}", "--mem-fraction-static={}", "--mem-frac {}"])
CHUNK_FORMS = st.sampled_from(["", "--chunked-prefill-size {}", "--chunked-prefill-size={}", "--chunked {}"])
OTHER = st.sampled_from(["--tp 8", "--port 30000", "--trust-remote-code", "--host 0.0.0.0", "--model-path /m"])


@st.composite
def units(draw: st.DrawFn) -> str:
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    words = [draw(FLAG_FORMS).format(draw(st.sampled_from(["0.9", "0.85", "0.5", "0.94"])))]
    chunk = draw(CHUNK_FORMS)
    if chunk:
        words.append(chunk.format(draw(st.sampled_from(["-1", "2048", "4096", "16384"]))))
    words += draw(st.lists(OTHER, max_size=4))
    if draw(st.booleans()):
        words.append(words[0].replace("0.", "0.7", 1))  # a repeat
    words = draw(st.permutations(words))
    seps = [draw(st.sampled_from([" ", f" \\{eol}    ", f" \\{eol}# note{eol}    "])) for _ in words]
    line = "ExecStart=/opt/venv/bin/python3 -m sglang.launch_server" + "".join(
        sep + word for sep, word in zip(seps, words, strict=True)
    )
    env = draw(
        st.sampled_from(
            [
                "",
                f"Environment=CUDA_HOME=/usr/local/cuda{eol}",
                f'Environment="PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512" A=b{eol}',
                f"Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False{eol}",
            ]
        )
    )
    tail = draw(st.sampled_from(["", eol, f"{eol}Restart=always{eol}"]))
    return f"[Unit]{eol}Description=x{eol}{eol}[Service]{eol}{env}{line}{tail}"


desired_states = st.builds(
    DesiredState,
    mem_fraction_static=st.sampled_from([None, Decimal("0.8"), Decimal("0.93")]),
    mem_fraction_step=st.sampled_from([Decimal("0.01"), Decimal("0.05")]),
    chunked_prefill_size=st.sampled_from([None, 4096, 8192, -1, 1024]),
    chunk_is_ceiling=st.booleans(),
    alloc_conf=st.sampled_from(
        [None, "expandable_segments:True", "expandable_segments:True,garbage_collection_threshold:0.6"]
    ),
)
EDITED = ("mem-frac", "chunked", "PYTORCH_CUDA_ALLOC_CONF", "# remediate: oom")


def _sources(text: str) -> UnitSources:
    return UnitSources(SourceFile("/etc/systemd/system/sglang.service", text))


@settings(max_examples=300, deadline=None)
@given(units(), desired_states)
def test_plan_is_idempotent_and_local(text: str, desired: DesiredState) -> None:
    assert render_unit(parse_unit(text)) == text
    try:
        plan = plan_edit(_sources(text), desired, now=NOW)
    except ConfigError:
        return
    new = plan.files[0].new_text if plan.files else text
    again = plan_edit(_sources(new), desired, now=NOW)
    assert not again.is_changed, (new, again.changes)
    assert again.before == plan.after
    old_lines = text.splitlines()
    new_lines = new.splitlines()
    edited_old = [line for line in old_lines if any(mark in line for mark in EDITED)]
    for line in set(old_lines) - set(new_lines):  # gone: held an edited token, or got a flag appended
        assert line in edited_old or any(b.startswith(line + " --") for b in new_lines), line
    for line in set(new_lines) - set(old_lines):  # new: holds an edited token, or is an edited line minus a repeat
        words = line.split()
        assert any(mark in line for mark in EDITED) or any(
            not (Counter(words) - Counter(old.split())) for old in edited_old
        ), line
    # Every line that holds no edited token is still there, as often as before.
    appended_to = {line for line in old_lines if any(b.startswith(line + " --chunked") for b in new_lines)}
    untouched = Counter(line for line in old_lines if line not in edited_old and line not in appended_to)
    assert not (untouched - Counter(new_lines))
