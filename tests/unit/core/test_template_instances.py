"""core/unitfile/instances.py: a template's instances, as `oom --all-instances` reads and orders them."""

from __future__ import annotations

import pytest

from remediate.core.unitfile.instances import Instance, instances_pattern, parse_instances, roll_order, template_of


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
