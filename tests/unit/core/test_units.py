"""Several units per host, the pure part: ``--unit`` as a selection, systemd's globs (checked against the C
library's own fnmatch(3) with FNM_NOESCAPE, which systemd's manager calls), the host's listing, and which
units `oom` acts on."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.core.diagnosis import parse_journal
from remediate.core.units import (
    UnitCrash,
    UnitSelection,
    crashed_units,
    has_crashed,
    is_unit_glob,
    normalise_unit_spec,
    parse_unit_listing,
    parse_unit_spec,
    select_units,
    single_unit,
    unit_fnmatch,
)
from remediate.errors import ConfigError

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
FNM_NOESCAPE = 2  # <fnmatch.h>


def libc_fnmatch(pattern: str, name: str) -> bool:
    return _LIBC.fnmatch(pattern.encode(), name.encode(), FNM_NOESCAPE) == 0


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("sglang@*", "sglang@0-3.service", True),
        ("sglang@*", "sglang.service", False),
        ("sglang-*.service", "sglang-chat.service", True),
        ("sglang-*.service", "sglang-chat.socket", False),
        ("sglang-*", "sglang-embed.service", True),
        ("sglang?.service", "sglang1.service", True),
        ("sglang?.service", "sglang.service", False),
        ("sglang@[0-4]*", "sglang@4-7.service", True),
        ("sglang@[!0]*", "sglang@0-3.service", False),
        ("sglang@[^0]*", "sglang@4-7.service", True),
        ("sglang@[[:digit:]]-*", "sglang@0-3.service", True),
        ("sglang@[]]*", "sglang@].service", True),
        ("a\\x2db*", "a\\x2dbc.service", True),  # a backslash is a plain character (FNM_NOESCAPE)
        ("sglang[*", "sglang[x.service", True),  # an unterminated bracket is a literal "["
        ("sglang[*", "sglangx.service", False),
        ("a[[=b=]]", "ab", True),  # an equivalence class of one character
        ("a[[.b.]]", "ab", True),  # a collating symbol
        ("a[[.bc.]]", "ab", False),  # of several characters: matches nothing
        ("a[[.b", "a[[.b", False),  # never closed: matches nothing
        ("a[[:foo:]]", "af", False),  # an unknown class matches nothing
        ("a[b-[:digit:]]", "ab", False),  # a range to a class matches nothing
        ("a[[:digit:]", "a[[:digit:]", False),  # cut off after a class: matches nothing
        ("a[[.b.]-d]", "ac", True),
        ("a[b-", "ab", False),  # cut off in a range
        ("a[[-", "a[[-", True),  # … but its first character still matches itself, then "[" is literal
    ],
)
def test_fnmatch_cases(pattern: str, name: str, matches: bool) -> None:
    assert unit_fnmatch(pattern, name) is matches
    assert libc_fnmatch(pattern, name) is matches


_ALPHABET = "ab0-:@._[]!^*?\\"


@settings(max_examples=800, deadline=None)
@given(st.text(_ALPHABET, min_size=1, max_size=8), st.text("ab0-:@._[]!^\\", max_size=8))
def test_fnmatch_is_the_c_librarys(pattern: str, name: str) -> None:
    assert unit_fnmatch(pattern, name) == libc_fnmatch(pattern, name), (pattern, name)


def test_a_plain_name_stays_as_before() -> None:
    assert normalise_unit_spec("sglang") == "sglang.service"
    assert parse_unit_spec("sglang-chat.service").is_single
    assert not is_unit_glob("sglang@0-3.service")


def test_globs_and_lists() -> None:
    selection = parse_unit_spec("sglang@*, sglang-chat , sglang@*")
    assert selection == UnitSelection(("sglang@*", "sglang-chat.service"))
    assert selection.has_glob and not selection.is_single
    assert selection.text == "sglang@*,sglang-chat.service"
    listed = parse_unit_spec("a.service,b.service")
    assert not listed.has_glob and not listed.is_single


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sglang@*;rm", "is not a valid unit glob"),
        ("-*", "is not a valid unit glob"),
        ("a,,b", "empty name between its commas"),
        ("a/b*", "is not a valid unit glob"),
        ("a b", "is not a valid systemd unit name"),
        ("sglang@", "is a template"),
    ],
)
def test_bad_specs_are_one_line_errors(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_unit_spec(spec)
    assert "\n" not in str(caught.value) and "--unit" in str(caught.value)


def test_single_unit_commands_refuse_a_selection() -> None:
    assert single_unit(None, "bench") is None
    assert single_unit("sglang", "bench") == "sglang.service"
    with pytest.raises(ConfigError, match="`remediate watch` works on one unit per host"):
        single_unit("sglang@*", "watch")
    with pytest.raises(ConfigError, match="one unit per host"):
        single_unit("a,b", "bench")


LIST_UNITS = """\
sglang@30001.service loaded active running sglang 30001
● sglang@30002.service loaded failed failed sglang 30002
  sglang-chat.service  loaded inactive dead sglang chat
sglang@30001.service loaded active running sglang 30001
sglang.socket loaded active listening sglang socket
"""
LIST_UNIT_FILES = """\
sglang@.service disabled enabled
sglang-chat.service enabled enabled
sglang-embed.service disabled enabled
"""


def test_listing_parsed_templates_and_other_types_left_out() -> None:
    names = parse_unit_listing(LIST_UNITS + "@@files\n" + LIST_UNIT_FILES)
    assert names == (
        "sglang@30001.service",
        "sglang@30002.service",
        "sglang-chat.service",
        "sglang-embed.service",
    )


def test_selection_over_a_listing() -> None:
    listed = parse_unit_listing(LIST_UNITS + LIST_UNIT_FILES)
    assert select_units(parse_unit_spec("sglang@*"), listed) == ("sglang@30001.service", "sglang@30002.service")
    assert select_units(parse_unit_spec("sglang-*.service"), listed) == ("sglang-chat.service", "sglang-embed.service")
    assert select_units(parse_unit_spec("vllm-*"), listed) == ()
    # an exact name is kept even when not listed: its own run says "not found"
    assert select_units(parse_unit_spec("other.service,sglang-e*"), listed) == (
        "other.service",
        "sglang-embed.service",
    )


OOM_RUN = [
    "2026-01-01T00:00:00+0000 h python[1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]


def test_crashed_is_the_diagnosis_current_failure() -> None:
    assert has_crashed(parse_journal(OOM_RUN, {}))
    assert not has_crashed(parse_journal([], {}))


def test_oom_acts_on_the_crashed_units() -> None:
    evidence = (UnitCrash("a.service", True), UnitCrash("b.service", False), UnitCrash("c.service", True))
    assert crashed_units("gpu-01", evidence) == ("a.service", "c.service")


def test_none_crashed_is_refused_listing_the_units() -> None:
    evidence = (UnitCrash("sglang-chat.service", False), UnitCrash("sglang-embed.service", False))
    with pytest.raises(ConfigError) as caught:
        crashed_units("gpu-01", evidence)
    text = str(caught.value)
    assert text.startswith("gpu-01: several sglang units (sglang-chat.service, sglang-embed.service)")
    assert "none crashed" in text and "`remediate oom gpu-01 --unit sglang-chat.service`" in text
    assert "\n" not in text and caught.value.exit_code == 2


def test_unreadable_evidence_is_refused_naming_it() -> None:
    evidence = (UnitCrash("a.service", True), UnitCrash("b.service", False, unreadable="probe failed (exit 1)"))
    with pytest.raises(ConfigError, match=r"unreadable \(b.service: probe failed \(exit 1\)\).*--unit b.service"):
        crashed_units("gpu-01", evidence)
    assert evidence[1].state == "probe failed (exit 1)" and evidence[0].state == "crashed"
    with pytest.raises(ConfigError, match="no sglang unit"):
        crashed_units("gpu-01", ())
