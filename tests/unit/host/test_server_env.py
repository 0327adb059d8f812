"""The running server's environment: parsed from the host's read, checked against the alloc conf."""

from __future__ import annotations

import pytest

from remediate.core.unitfile.alloc import missing_options
from remediate.errors import RemediationError
from remediate.host.common.environ import ServerEnv, environ_script, parse_environ
from remediate.host.common.verify import env_problems, verify_server_env

WANTED = "expandable_segments:True"


def test_the_environ_read_is_parsed_with_a_value_holding_a_newline() -> None:
    out = "@@main 41\n@@environ 42\nPYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512\nexpandable_segments:True\n@@end\n"
    env = parse_environ(out)
    assert env == ServerEnv(
        42, "/proc/42/environ", {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512\nexpandable_segments:True"}
    )


def test_systemctl_show_environment_is_the_fallback() -> None:
    out = '@@main 42\n@@show 42\nCUDA_HOME=/usr/local/cuda "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"\n@@end\n'
    env = parse_environ(out)
    assert env is not None and env.source == "systemctl show -p Environment"
    assert env.values == {"PYTORCH_CUDA_ALLOC_CONF": WANTED}


@pytest.mark.parametrize(
    "out", ["@@main 0\n", "@@main 42\n@@environ 42\nPYTORCH_CUDA_ALLOC_CONF=x\n", "@@main 42\n@@none\n@@end\n"]
)
def test_no_main_process_or_a_cut_read_is_unknown(out: str) -> None:
    assert parse_environ(out) is None


def test_the_script_quotes_the_unit() -> None:
    assert "unit='a b;rm -rf /.service'" in environ_script("a b;rm -rf /.service")


@pytest.mark.parametrize(
    ("value", "missing"),
    [
        (None, [WANTED]),
        ("expandable_segments:True", []),
        ("expandable_segments:True,expandable_segments:False", [WANTED]),  # the last of a key wins
        ("max_split_size_mb:512, expandable_segments:True", []),
        ("expandable_segments:True\n", []),
    ],
)
def test_missing_options(value: str | None, missing: list[str]) -> None:
    assert missing_options(value, WANTED) == missing


def test_a_server_whose_environment_lacks_the_alloc_conf_fails_verification() -> None:
    dropped = ServerEnv(42, "/proc/42/environ", {})  # a split Environment= line: systemd dropped both
    with pytest.raises(RemediationError, match=r"PYTORCH_CUDA_ALLOC_CONF is unset \(/proc/42/environ\): it lacks"):
        verify_server_env("gpu-01", dropped, WANTED)
    verify_server_env("gpu-01", ServerEnv(42, "/proc/42/environ", {"PYTORCH_CUDA_ALLOC_CONF": WANTED}), WANTED)
    verify_server_env("gpu-01", None, WANTED)  # nothing readable (a container): not checked
    newer = ServerEnv(42, "/proc/42/environ", {"PYTORCH_CUDA_ALLOC_CONF": WANTED, "PYTORCH_ALLOC_CONF": "x:1"})
    assert env_problems(newer, WANTED) == [
        "the running server's PYTORCH_ALLOC_CONF is 'x:1' (/proc/42/environ): it lacks expandable_segments:True"
    ]
