"""core/journal.py: a saved journal's format told from its content, its lines as the live reads see them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.journal import PLAN_LINES, STARTUP_TAIL, parse_saved_journal
from remediate.core.logline import split_line

SHORT = "Dec 01 08:00:00 gpu-01 python3[4711]: [2026-12-01 08:00:00 TP0] Load weight begin. avail mem=91.60 GB"


@pytest.mark.parametrize(
    ("line", "form"),
    [
        (SHORT, "short"),
        ("Dec  1 08:00:00.123456 gpu-01 python3[4711]: hello", "short-precise"),
        ("2026-12-01T08:00:00+0000 gpu-01 python3[4711]: hello", "short-iso"),
        ("2026-12-01T08:00:00.123456+00:00 gpu-01 python3[4711]: hello", "short-iso-precise"),
        ("1764576000.123456 gpu-01 python3[4711]: hello", "short-unix"),
        ("[ 1234.567890] gpu-01 python3[4711]: hello", "short-monotonic"),
        ("[2026-12-01 08:00:00 TP0] Load weight begin. avail mem=91.60 GB", "cat"),
        ("Traceback (most recent call last):", "cat"),
    ],
)
def test_text_formats_pass_through(line: str, form: str) -> None:
    saved = parse_saved_journal(f"{line}\n{line}\n")
    assert saved.format == form
    assert saved.lines == (line, line)
    assert saved.messages == (split_line(0, line).evidence,) * 2


def test_markers_are_dropped_and_counted() -> None:
    text = "\n".join(
        [
            "-- Logs begin at Mon 2026-11-30 08:00:00 UTC, end at Tue 2026-12-01 09:00:00 UTC. --",
            "-- Journal begins at Mon 2026-11-30 08:00:00 UTC, ends at Tue 2026-12-01 09:00:00 UTC. --",
            SHORT,
            "-- Boot 0123456789abcdef0123456789abcdef --",
            "-- Reboot --",
            SHORT,
        ]
    )
    saved = parse_saved_journal(text)
    assert (saved.format, saved.lines, saved.markers) == ("short", (SHORT, SHORT), 4)


@pytest.mark.parametrize("text", ["", "\n\n", "-- No entries --\n", "\ufeff-- No entries --"])
def test_nothing_in_it(text: str) -> None:
    saved = parse_saved_journal(text)
    assert (saved.format, saved.lines, saved.messages) == ("empty", (), ())


def test_a_multi_line_message_in_short_keeps_its_lines_and_its_message_loses_the_indent() -> None:
    head = "Dec 01 08:00:00 gpu-01 python3[4711]: "
    text = f'{head}Traceback (most recent call last):\n{" " * len(head)}  File "x.py", line 1\nother\n'
    saved = parse_saved_journal(text)
    assert saved.lines == tuple(text.splitlines())
    assert saved.messages == ("Traceback (most recent call last):", '  File "x.py", line 1', "other")


def test_hosts_and_units_from_text() -> None:
    text = (
        "Dec 01 08:00:00 gpu-01 systemd[1]: Started sglang.service - sglang TP8.\n"
        "Dec 01 08:00:01 gpu-01 systemd[1]: sglang.service: Main process exited, code=exited, status=1/FAILURE\n"
        "Dec 01 08:00:01 gpu-01 python3[7]: sglang.service: not systemd's words\n"
        "Dec 01 08:00:02 gpu-02 systemd[1]: Starting other@0-3.service...\n"
        "Dec 01 08:00:02 gpu-02 systemd[1]: Started sglang Kimi TP8.\n"
    )
    saved = parse_saved_journal(text)
    assert saved.hosts == ("gpu-01", "gpu-02")
    assert saved.units == ("sglang.service",)
    assert parse_saved_journal("sglang-b.service: Failed with result 'exit-code'.\n").units == ("sglang-b.service",)


def _entry(**fields: object) -> str:
    return json.dumps({"__REALTIME_TIMESTAMP": "1764576000000000", "_HOSTNAME": "gpu-01", **fields})


def test_json_is_rendered_as_short_iso() -> None:
    text = "\n".join(
        [
            _entry(SYSLOG_IDENTIFIER="python3", _PID="4711", _SYSTEMD_UNIT="sglang.service", MESSAGE="hello"),
            _entry(_COMM="python3", SYSLOG_PID="12", MESSAGE="from _COMM"),
            _entry(
                SYSLOG_IDENTIFIER="systemd",
                _PID="1",
                _SYSTEMD_UNIT="init.scope",
                UNIT="sglang.service",
                MESSAGE="Started sglang.service - sglang.",
            ),  # fmt: skip
            _entry(MESSAGE="no identifier, no pid"),
        ]
    )
    saved = parse_saved_journal(text)
    assert saved.format == "json"
    assert saved.lines == (
        "2025-12-01T08:00:00+0000 gpu-01 python3[4711]: hello",
        "2025-12-01T08:00:00+0000 gpu-01 python3[12]: from _COMM",
        "2025-12-01T08:00:00+0000 gpu-01 systemd[1]: Started sglang.service - sglang.",
        "2025-12-01T08:00:00+0000 gpu-01 unknown: no identifier, no pid",
    )
    assert saved.messages == ("hello", "from _COMM", "Started sglang.service - sglang.", "no identifier, no pid")
    assert [split_line(0, line).ident for line in saved.lines] == ["python3", "python3", "systemd", "unknown"]
    assert (saved.hosts, saved.units) == (("gpu-01",), ("sglang.service",))


def test_json_messages_as_bytes_null_several_values_and_lines() -> None:
    text = "\n".join(
        [
            _entry(SYSLOG_IDENTIFIER="python3", MESSAGE=[*b"CUDA out of memory \xff", 10]),
            _entry(SYSLOG_IDENTIFIER="python3", MESSAGE=None),  # journalctl: too big or binary without --all
            _entry(SYSLOG_IDENTIFIER="python3"),  # no MESSAGE: journalctl's short skips it
            _entry(SYSLOG_IDENTIFIER=["python3", "other"], MESSAGE=["first", "second"]),
            _entry(SYSLOG_IDENTIFIER="python3", MESSAGE="Traceback:\n  File x\nError: boom\n"),
            _entry(SYSLOG_IDENTIFIER="py th[o]n:", _HOSTNAME="a b", _PID="x1", MESSAGE=7),
        ]
    )
    saved = parse_saved_journal(text)
    head = "2025-12-01T08:00:00+0000 gpu-01 python3: "
    assert saved.lines == (
        head + "CUDA out of memory \ufffd",
        head + "first",
        head + "Traceback:",
        " " * len(head) + "  File x",
        " " * len(head) + "Error: boom",
        "2025-12-01T08:00:00+0000 a_b py_th_o_n_: 7",
    )
    assert saved.messages[2:5] == ("Traceback:", "  File x", "Error: boom")


def test_json_garbage_is_skipped_and_counted() -> None:
    text = "\n".join(
        [
            _entry(SYSLOG_IDENTIFIER="python3", MESSAGE="kept"),
            "{not json",
            "[1, 2]",
            "\x1e" + _entry(SYSLOG_IDENTIFIER="python3", MESSAGE="json-seq"),
            "",
            _entry(SYSLOG_IDENTIFIER="python3", __REALTIME_TIMESTAMP="soon", MESSAGE="bad time"),
            _entry(SYSLOG_IDENTIFIER="python3", __REALTIME_TIMESTAMP="9" * 30, MESSAGE="far"),
            "[" * 100_000,
        ]
    )
    saved = parse_saved_journal(text)
    assert saved.messages == ("kept", "json-seq", "bad time", "far")
    assert saved.skipped == 3
    assert saved.lines[2].startswith("1970-01-01T00:00:00+0000 ")


def test_json_pretty_is_read_whole() -> None:
    entries = [{"__REALTIME_TIMESTAMP": "1764576000000000", "SYSLOG_IDENTIFIER": "python3", "MESSAGE": m} for m in "ab"]
    saved = parse_saved_journal("\n".join(json.dumps(e, indent=8) for e in entries) + "\n")
    assert (saved.format, saved.messages, saved.skipped) == ("json", ("a", "b"), 0)
    broken = parse_saved_journal(json.dumps(entries[0], indent=8) + "\n}\n")
    assert (broken.messages, broken.skipped) == (("a",), 1)
    assert parse_saved_journal("{ nope\n}\n").skipped == 1


def test_plan_lines_are_the_live_plans_two_reads() -> None:
    startup = "[2026-12-01 08:00:00 TP0] Load weight begin. avail mem=91.60 GB"
    logged = "[2026-12-01 08:00:00] Prefill: the user wrote Load weight begin. avail mem=1 GB"
    messages = [startup] * (STARTUP_TAIL + 5) + [logged, "", "   "] + ["x"] * PLAN_LINES
    saved = parse_saved_journal("\n".join(messages))
    first, tail = saved.plan_lines()
    assert first == (startup,) * STARTUP_TAIL
    assert tail == ("x",) * PLAN_LINES


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_any_text_never_raises(text: str) -> None:
    saved = parse_saved_journal(text)
    saved.plan_lines()
    assert all(isinstance(line, str) for line in (*saved.lines, *saved.messages))


_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=50),
    st.lists(st.integers(-300, 300), max_size=20),
    st.lists(st.text(max_size=10), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
_FIELDS = st.sampled_from(
    [
        "MESSAGE",
        "__REALTIME_TIMESTAMP",
        "_HOSTNAME",
        "SYSLOG_IDENTIFIER",
        "_COMM",
        "_PID",
        "SYSLOG_PID",
        "_SYSTEMD_UNIT",
        "UNIT",
    ]  # fmt: skip
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(_FIELDS, _VALUE, max_size=9), min_size=1, max_size=10))
def test_any_json_entry_never_raises(entries: list[dict[str, object]]) -> None:
    saved = parse_saved_journal("\n".join(json.dumps(e) for e in entries))
    assert saved.format == "json"
    assert all(isinstance(line, str) for line in saved.lines)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=80), min_size=1))
def test_json_messages_come_back_as_the_live_lines_messages(messages: list[str]) -> None:
    """Each one-line message, as a string or as bytes, is the message core/logline.py finds in its line."""
    text = "\n".join(
        _entry(SYSLOG_IDENTIFIER="python3", _PID="1", MESSAGE=list(m.encode()) if i % 2 else m)
        for i, m in enumerate(messages)
    )
    saved = parse_saved_journal(text)
    assert saved.messages == tuple(messages)
    assert tuple(split_line(0, line).evidence for line in saved.lines) == tuple(messages)


@pytest.mark.parametrize(
    ("micros", "iso"),
    [
        ("0", "1970-01-01T00:00:00+0000"),
        ("951782400000000", "2000-02-29T00:00:00+0000"),
        ("1796307600123456", "2026-12-03T14:20:00+0000"),
        ("253402300799999999", "9999-12-31T23:59:59+0000"),
        ("253402300800000000", "1970-01-01T00:00:00+0000"),  # past journalctl's range
        ("-5", "1970-01-01T00:00:00+0000"),
        ("soon", "1970-01-01T00:00:00+0000"),
    ],
)
def test_a_json_entry_time_is_utc_without_a_clock(micros: str, iso: str) -> None:
    entry = {"__REALTIME_TIMESTAMP": micros, "MESSAGE": "x", "SYSLOG_IDENTIFIER": "python3", "_HOSTNAME": "h"}
    assert parse_saved_journal(json.dumps(entry)).lines[0].startswith(iso + " h python3")
