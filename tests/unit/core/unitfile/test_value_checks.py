"""Every value check matches the whole value: ``$`` also matches before a trailing newline, so a value
ending in ``\\n`` (an inventory ``alloc_conf: |`` block has one) passed ``re.match(r"^...$")``."""

from __future__ import annotations

import pytest

from remediate.core.backups import parse_backup_name
from remediate.core.unitfile.edit import DesiredState, validate_desired
from remediate.core.unitfile.execline import quote_word
from remediate.errors import ConfigError
from remediate.fleet.request import DesiredArgs
from remediate.fleet.settings import desired_state


def test_an_inventory_alloc_conf_block_with_its_newline_is_refused() -> None:
    # `alloc_conf: |` in YAML gives "expandable_segments:True\n": merged into an Environment= line the
    # newline splits it in two and systemd drops both assignments.
    with pytest.raises(ConfigError, match=r"alloc conf must look like key:value.*\\n"):
        desired_state(DesiredArgs(), {"alloc_conf": "expandable_segments:True\n"})
    with pytest.raises(ConfigError):
        validate_desired(DesiredState(alloc_conf="expandable_segments:True\n"))
    validate_desired(DesiredState(alloc_conf="expandable_segments:True,max_split_size_mb:512"))


def test_a_word_with_a_trailing_newline_is_quoted_for_execstart() -> None:
    assert quote_word("0.93") == "0.93"
    assert quote_word("0.93\n") == '"0.93\\n"'


def test_a_backup_name_with_a_trailing_newline_is_not_a_backup() -> None:
    assert parse_backup_name("/etc/systemd/system/sglang.service.bak.oom.1795939200\n") is None
    assert parse_backup_name("/etc/systemd/system/sglang.service.bak.oom.1795939200") is not None
