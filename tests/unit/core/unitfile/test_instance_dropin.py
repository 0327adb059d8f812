"""Issue 24: a change to one instance of a template unit is planned in remediate's own drop-in of that
instance, never in the template or a shared drop-in; a shared EnvironmentFile= stays refused."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from remediate.core.unitfile.dropin import (
    DROPIN_NAME,
    created_dropin,
    dropin_path,
    plan_instance_edit,
    with_instance_dropin,
)
from remediate.core.unitfile.edit import DesiredState, SourceFile, UnitSources, read_settings
from remediate.core.unitfile.sources import refuse_template_edit, server_args
from remediate.errors import ConfigError

NOW = datetime(2026, 12, 4, 4, 0, 0, tzinfo=UTC)
TEMPLATE = "/etc/systemd/system/sglang@.service"
SHARED_DROPIN = "/etc/systemd/system/sglang@.service.d/10-model.conf"
UNIT = "sglang@0-3.service"
MINE = f"/etc/systemd/system/{UNIT}.d/{DROPIN_NAME}"
LINE = (
    "ExecStart=/opt/venv/bin/python3 -m sglang.launch_server --model-path /m \\\n"
    "    --port 300%i --mem-fraction-static 0.9 --served-model-name gpu-%I"
)
TEXT = f"[Unit]\nDescription=sglang %i\n[Service]\nEnvironment=HF_HOME=/data\n{LINE}\nRestart=on-failure\n"


def sources(fragment: str = TEXT, dropins: tuple[SourceFile, ...] = (), env: dict[str, str | None] | None = None):  # type: ignore[no-untyped-def]
    return UnitSources(SourceFile(TEMPLATE, fragment), dropins, env if env is not None else {}, UNIT)


def test_template_line_goes_into_the_instance_dropin() -> None:
    result = plan_instance_edit(sources(), DesiredState(), now=NOW)
    assert [(f.path, f.created, f.old_text) for f in result.files] == [(MINE, True, "")]
    text = result.files[0].new_text
    assert text.startswith("# Written by remediate (oom): a drop-in for sglang@0-3.service only")
    body = text.split("[Service]\n", 1)[1]
    assert body.index("ExecStart=\n") < body.index("ExecStart=/opt")  # the reset comes first
    assert "--port 300%i" in body and "gpu-%I" in body  # specifiers kept as written
    assert "--mem-fraction-static 0.89" in body and "--chunked-prefill-size 4096" in body
    assert "Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" in body
    assert "# remediate: oom 2026-12-04T04:00:00Z mem-fraction-static 0.9->0.89\n" in body
    refuse_template_edit(UNIT, [f.path for f in result.files])  # the instance's own file: allowed
    after = sources(dropins=(SourceFile(MINE, text),))
    assert read_settings(after).mem_fraction_static == "0.89"
    assert "--port" in server_args(after) and "3000-3" in server_args(after)


def test_second_run_edits_the_dropin_and_is_unchanged() -> None:
    first = plan_instance_edit(sources(), DesiredState(), now=NOW).files[0].new_text
    again = sources(dropins=(SourceFile(MINE, first),))
    assert with_instance_dropin(again) is None
    assert plan_instance_edit(again, DesiredState(), now=NOW).files == ()
    lower = plan_instance_edit(again, DesiredState(mem_fraction_static=Decimal("0.8")), now=NOW)
    assert [(f.path, f.created) for f in lower.files] == [(MINE, False)]
    assert "--mem-fraction-static 0.8 " in lower.files[0].new_text


def test_template_untouched_and_siblings_unaffected() -> None:
    result = plan_instance_edit(sources(), DesiredState(), now=NOW)
    assert all(f.path != TEMPLATE for f in result.files)
    sibling = UnitSources(SourceFile(TEMPLATE, TEXT), (), {}, "sglang@4-7.service")
    assert read_settings(sibling).mem_fraction_static == "0.9"


def test_shared_dropin_exec_start_and_its_environment_are_copied() -> None:
    shared = SourceFile(
        SHARED_DROPIN,
        '[Service]\nEnvironment="SGLANG_ARGS=--tp 4" PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6\n'
        "ExecStart=\nExecStart=/opt/venv/bin/python3 -m sglang.launch_server $SGLANG_ARGS --mem-fraction-static 0.88\n",
    )
    result = plan_instance_edit(sources(dropins=(shared,)), DesiredState(), now=NOW)
    assert [f.path for f in result.files] == [MINE]
    text = result.files[0].new_text
    assert "garbage_collection_threshold:0.6,expandable_segments:True" in text
    assert "--mem-fraction-static 0.87" in text


def test_instance_own_dropin_is_edited_in_place() -> None:
    own = SourceFile(f"/etc/systemd/system/{UNIT}.d/50-local.conf", f"[Service]\nExecStart=\n{LINE}\n")
    assert with_instance_dropin(sources(dropins=(own,))) is None
    result = plan_instance_edit(sources(dropins=(own,)), DesiredState(), now=NOW)
    assert [(f.path, f.created) for f in result.files] == [(own.path, False)]


def test_shared_environment_file_still_refused_naming_it() -> None:
    env = "/etc/default/sglang"
    text = f"[Service]\nEnvironmentFile={env}\nExecStart=/opt/venv/bin/python3 -m sglang.launch_server $SGLANG_ARGS\n"
    result = plan_instance_edit(sources(text, env={env: "SGLANG_ARGS=--model-path /m --mem-fraction-static 0.9\n"}),
                                DesiredState(), now=NOW)  # fmt: skip
    assert env in [f.path for f in result.files]
    with pytest.raises(ConfigError) as info:
        refuse_template_edit(UNIT, [f.path for f in result.files])
    assert str(info.value).startswith(f"{env}: {UNIT} is an instance of a template")


def test_not_an_instance_plans_as_before() -> None:
    plain = UnitSources(SourceFile("/etc/systemd/system/sglang.service", TEXT.replace("%i", "0")), (), {}, None)
    assert with_instance_dropin(plain) is None
    assert dropin_path("sglang@a.service") == "/etc/systemd/system/sglang@a.service.d/90-remediate-oom.conf"


def test_rollback_finds_the_created_dropin_only_while_it_has_no_backup() -> None:
    text = plan_instance_edit(sources(), DesiredState(), now=NOW).files[0].new_text
    mine = sources(dropins=(SourceFile(MINE, text),))
    assert created_dropin(mine, []) == SourceFile(MINE, text)
    assert created_dropin(mine, [MINE]) is None  # edited since: its backup is restored instead
    foreign = sources(dropins=(SourceFile(MINE, "[Service]\nExecStart=\n" + LINE + "\n"),))
    assert created_dropin(foreign, []) is None  # not written by remediate: never removed
