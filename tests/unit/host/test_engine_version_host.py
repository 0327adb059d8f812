"""`diagnose` keyed on the engine's version, through the Python API on one scripted host (FakeTransport): the
package the probe listed (``@@dists``) gives the release, and the release names the flag to write."""

from __future__ import annotations

from decimal import Decimal

from remediate.core.unitfile.edit import DesiredState
from remediate.host.common.version import with_version_default
from remediate.models import EngineVersion
from tests.support.hosts import case_journal as journal
from tests.support.hosts import diagnose_host as host
from tests.support.hosts import diagnose_one as run

CASE = "argparse-ambiguous-graph-flag-0.5.23"  # sglang 0.5.23 refusing --cuda-graph-max-bs (argparse, exit 2)
DISTS = ["@@dists", "/opt/sglang/lib/python3.12/site-packages/sglang-0.5.23.dist-info"]


def test_the_package_release_names_the_flag_it_accepts() -> None:
    result = run(host(journal(CASE) + DISTS))
    assert result["engine_version"] == {"engine": "sglang", "version": "0.5.23", "source": "package"}
    reason = result["recommendation"]["reasons"][0]
    assert reason.endswith("this version does not accept it: write --cuda-graph-max-bs-decode"), reason


def test_an_unknown_release_keeps_argparse_s_own_choices() -> None:
    result = run(host(journal(CASE)))
    assert "engine_version" not in result
    reason = result["recommendation"]["reasons"][0]
    assert "write one of --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill in full" in reason, reason


def test_a_plan_takes_the_vllm_release_default() -> None:
    assert with_version_default(DesiredState(), EngineVersion("vllm", "0.20.0", "package")).fraction_default == (
        Decimal("0.92")
    )
    assert with_version_default(DesiredState(), EngineVersion("vllm", "0.11.0", "log")).fraction_default == (
        Decimal("0.9")
    )
    for unknown in (None, EngineVersion("sglang", "0.5.23", "server")):
        assert with_version_default(DesiredState(), unknown) == DesiredState()
