"""The api is a typed front door: one frozen request per command, one call shape for every function that
reaches hosts, no ``**kw``. (The command line's side: tests/unit/faces/test_typed_commands.py.)"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from remediate import api
from remediate.errors import ConfigError
from tests.support.fake_transport import FakeTransport

# Each function that reaches hosts, and its request type.
REMOTE = {
    "status": api.StatusRequest,
    "diagnose": api.DiagnoseRequest,
    "backups": api.BackupsRequest,
    "plan": api.PlanRequest,
    "bench": api.BenchRequest,
    "rollback": api.RollbackRequest,
    "remediate_oom": api.OomRequest,
}
FUNCTIONS = sorted(n for n in api.__all__ if inspect.isfunction(getattr(api, n)))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_no_public_function_takes_untyped_keywords(name: str) -> None:
    kinds = {p.kind for p in inspect.signature(getattr(api, name)).parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds


@pytest.mark.parametrize("name", sorted(REMOTE))
def test_every_remote_function_takes_its_request_then_the_same_keywords(name: str) -> None:
    """``fn(request, *, transport_factory=None, progress=None, …)``: the request its only positional."""
    params = list(inspect.signature(getattr(api, name)).parameters.values())
    first, rest = params[0], params[1:]
    assert first.name == "request" and first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, name
    assert first.annotation == REMOTE[name].__name__, (name, first.annotation)  # postponed annotations: the name
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty for p in rest)
    assert [p.name for p in rest[:2]] == ["transport_factory", "progress"], name


@pytest.mark.parametrize("request_type", sorted(set(REMOTE.values()), key=lambda t: t.__name__))
def test_every_request_is_frozen_and_says_where_its_hosts_are(request_type: type) -> None:
    assert dataclasses.is_dataclass(request_type) and request_type.__dataclass_params__.frozen  # type: ignore[attr-defined]
    fields = {f.name for f in dataclasses.fields(request_type)}
    assert {"targets", "inventory", "ssh"} <= fields, request_type


def test_the_rollouts_take_their_strategy_as_one_typed_value() -> None:
    for request_type in (api.OomRequest, api.RollbackRequest):
        (strategy,) = [f for f in dataclasses.fields(request_type) if f.name == "strategy"]
        assert strategy.type == "StrategyArgs", request_type
    (desired,) = [f for f in dataclasses.fields(api.OomRequest) if f.name == "desired"]
    assert desired.type == "DesiredArgs"


def test_remediate_oom_takes_one_request_with_what_the_cli_has() -> None:
    fields = {f.name for f in dataclasses.fields(api.OomRequest)}
    assert {"auto", "allow_raise", "probe_tokens", "lock_timeout", "retry_file", "force", "rollback"} <= fields


def test_a_bad_strategy_value_is_refused_before_any_host() -> None:
    request = api.OomRequest(targets=("root@gpu-01",), strategy=api.StrategyArgs(batch="0"))
    with pytest.raises(ConfigError, match="--batch '0'"):
        api.remediate_oom(request, transport_factory=_no_host)


def _no_host(entry: object, options: object) -> FakeTransport:
    return FakeTransport("gpu-01")  # nothing scripted: the request is refused before any command runs


def test_auto_and_allow_raise_reach_the_rollout_through_the_api() -> None:
    """The old keyword API could not ask for `--auto` at all; the request carries it (and its checks apply)."""
    with pytest.raises(ConfigError, match="add --auto, or drop --allow-raise"):
        api.remediate_oom(api.OomRequest(targets=("root@gpu-01",), allow_raise=True), transport_factory=_no_host)
    fixed = api.desired_args(mem_fraction_static="0.9")
    request = api.OomRequest(targets=("root@gpu-01",), auto=True, desired=fixed, dry_run=True)
    with pytest.raises(ConfigError, match="--auto chooses the fraction"):
        api.remediate_oom(request, transport_factory=_no_host)
