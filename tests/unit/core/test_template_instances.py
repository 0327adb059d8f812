"""core/instances.py: a template's instances, as `oom --all-instances` reads and orders them."""

from __future__ import annotations

import pytest

from remediate.core.instances import (
    Instance,
    instances_pattern,
    is_reached,
    parse_instances,
    roll_order,
    settings_after,
    template_of,
)
from remediate.core.unitfile.edit import SourceFile, UnitSources


@pytest.mark.parametrize(
    ("unit", "template"),
    [
        ("sglang@0-3.service", "sglang@.service"),
        ("sglang-chat@a:b.service", "sglang-chat@.service"),
        ("sglang.service", None),
        ("sglang@.service", None),
        ("@x.service", None),
        ("sglang@x", None),
    ],
)
def test_template_of(unit: str, template: str | None) -> None:
    assert template_of(unit) == template


def test_pattern() -> None:
    assert instances_pattern("sglang@.service") == "sglang@*.service"


LISTING = """@@locked
@@instance sglang@4-7.service loaded active running
@@instance sglang@0-3.service loaded failed failed
@@instance sglang@8.service not-found inactive dead
@@instance sglang-embed@0.service loaded active running
@@instance sglang@0-3.service loaded failed failed
@@instance short line
noise
@@end
"""


def test_parse_keeps_the_templates_loaded_instances_by_name() -> None:
    found = parse_instances(LISTING, "sglang@.service")
    assert found == (
        Instance("sglang@0-3.service", "loaded", "failed", "failed"),
        Instance("sglang@4-7.service", "loaded", "active", "running"),
    )
    assert [i.is_running for i in found] == [False, True]
    assert Instance("a@b.service", "loaded", "activating", "start").is_running


def test_roll_order_canary_first_whether_listed_or_not() -> None:
    found = parse_instances(LISTING, "sglang@.service")
    assert roll_order(found, "sglang@4-7.service") == ["sglang@4-7.service", "sglang@0-3.service"]
    assert roll_order((), "sglang@9.service") == ["sglang@9.service"]


TEMPLATE = "/etc/systemd/system/sglang@.service"
LINE = "ExecStart=/usr/bin/python3 -m sglang.launch_server --port %i --mem-fraction-static {}\n"


def _sources(own: str | None = None) -> UnitSources:
    dropins = () if own is None else (SourceFile("/etc/systemd/system/sglang@1.service.d/own.conf", own),)
    return UnitSources(SourceFile(TEMPLATE, "[Service]\n" + LINE.format("0.94")), dropins, {}, "sglang@1.service")


def test_a_change_of_the_template_reaches_an_instance_that_reads_it() -> None:
    before, after = settings_after(_sources(), {TEMPLATE: "[Service]\n" + LINE.format("0.93"), "/other": "x"})
    assert before is not None and after is not None
    assert (before.mem_fraction_static, after.mem_fraction_static) == ("0.94", "0.93")
    assert is_reached(before, after)


def test_an_instance_whose_own_dropin_sets_the_line_is_not_reached() -> None:
    own = "[Service]\nExecStart=\n" + LINE.format("0.9")
    before, after = settings_after(_sources(own), {TEMPLATE: "[Service]\n" + LINE.format("0.93")})
    assert before is not None and before.mem_fraction_static == "0.9"
    assert not is_reached(before, after)


def test_unreadable_settings_count_as_reached() -> None:
    before, after = settings_after(_sources(), {TEMPLATE: "[Service]\nExecStart=/bin/true\n"})
    assert before is not None and after is None
    assert is_reached(before, after) and is_reached(None, before)
