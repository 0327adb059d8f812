"""The api is a typed front door: no ``**kw``, one keyword shape for every function that reaches hosts."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from remediate import api
from remediate.errors import ConfigError
from tests.support.fake_transport import FakeTransport

REMOTE = ("status", "diagnose", "backups", "plan", "bench", "rollback")
FUNCTIONS = sorted(n for n in api.__all__ if inspect.isfunction(getattr(api, n)))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_no_public_function_takes_untyped_keywords(name: str) -> None:
    kinds = {p.kind for p in inspect.signature(getattr(api, name)).parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds


@pytest.mark.parametrize("name", REMOTE)
def test_every_remote_function_has_the_same_shape(name: str) -> None:
    params = inspect.signature(getattr(api, name)).parameters
    assert list(params)[0] == "targets"
    for keyword in ("inventory", "ssh", "transport_factory"):
        assert params[keyword].kind is inspect.Parameter.KEYWORD_ONLY, (name, keyword)


def test_a_rollout_takes_its_strategy_by_the_same_name() -> None:
    assert "strategy" in inspect.signature(api.rollback).parameters
    fields = {f.name for f in dataclasses.fields(api.OomRequest)}
    assert {"targets", "inventory", "ssh", "strategy"} <= fields


def test_remediate_oom_takes_one_request_with_what_the_cli_has() -> None:
    assert len(inspect.signature(api.remediate_oom).parameters) <= 8
    fields = {f.name for f in dataclasses.fields(api.OomRequest)}
    assert {"auto", "allow_raise", "probe_tokens", "lock_timeout", "retry_file", "force", "rollback"} <= fields


def _no_host(entry: object, options: object) -> FakeTransport:
    return FakeTransport("gpu-01")  # nothing scripted: the request is refused before any command runs


def test_auto_and_allow_raise_reach_the_rollout_through_the_api() -> None:
    """The old keyword API could not ask for `--auto` at all; the request carries it (and its checks apply)."""
    with pytest.raises(ConfigError, match="add --auto, or drop --allow-raise"):
        api.remediate_oom(api.OomRequest(targets=("root@gpu-01",), allow_raise=True), transport_factory=_no_host)
    fixed = api.desired_args(mem_fraction_static="0.9")
    request = api.OomRequest(targets=("root@gpu-01",), auto=True, cli_desired=fixed, dry_run=True)
    with pytest.raises(ConfigError, match="--auto chooses the fraction"):
        api.remediate_oom(request, transport_factory=_no_host)
