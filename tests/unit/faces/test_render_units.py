"""Several units per host in the human output and the JSON: a row per host and unit; one unit per host
renders as it always did."""

from __future__ import annotations

import io
import json

from rich.console import Console

from remediate.cli.render.console import dumps, results_document
from remediate.cli.render.results import recap, several_units, status_table
from remediate.fleet.jobs import flatten
from remediate.host.units import bundle
from remediate.models import HostResult


def _text(render: object, results: list[HostResult]) -> str:
    out = io.StringIO()
    render(Console(file=out, force_terminal=False, width=200), results)  # type: ignore[operator]
    return out.getvalue()


def _two() -> list[HostResult]:
    chat = HostResult("gpu-01", outcome="remediated", unit="sglang-chat.service", started_at=1, finished_at=3)
    embed = HostResult("gpu-01", outcome="failed", unit="sglang-embed.service", error="boom", exit_code=1)
    return flatten([bundle("gpu-01", [chat, embed]), HostResult("gpu-02", outcome="unchanged", unit="sglang.service")])


def test_the_recap_names_the_unit_only_when_a_host_ran_several() -> None:
    rows = _two()
    assert several_units(rows)
    text = _text(recap, rows)
    header = next(line for line in text.splitlines() if "host" in line and "outcome" in line)
    assert "unit" in header
    assert "sglang-chat.service" in text and "sglang-embed.service" in text
    one = [HostResult("gpu-01", outcome="remediated", unit="sglang.service")]
    assert not several_units(one)
    header = next(line for line in _text(recap, one).splitlines() if "host" in line and "outcome" in line)
    assert "unit" not in header


def test_status_lists_each_unit_of_a_host() -> None:
    text = _text(status_table, _two())
    assert text.count("gpu-01") == 2 and "sglang-chat.service" in text


def test_the_json_has_a_result_per_host_and_unit_and_no_internal_fields() -> None:
    doc = json.loads(dumps(results_document(_two())))
    assert [(r["host"], r["unit"]) for r in doc["results"]] == [
        ("gpu-01", "sglang-chat.service"),
        ("gpu-01", "sglang-embed.service"),
        ("gpu-02", "sglang.service"),
    ]
    assert doc["summary"] == {"failed": 1, "remediated": 1, "unchanged": 1}
    assert not any("several_units" in r or "units" in r for r in doc["results"])


def test_a_bundle_is_the_hosts_worst_unit() -> None:
    ok = HostResult("gpu-01", outcome="remediated", unit="a.service", started_at=5, finished_at=9)
    bad = HostResult("gpu-01", outcome="rolled_back", unit="b.service", error="x", exit_code=1, started_at=1)
    host = bundle("gpu-01", [ok, bad])
    assert (host.outcome, host.error, host.exit_code, host.ok) == ("rolled_back", "x", 1, False)
    assert (host.started_at, host.finished_at) == (1, 9)
    assert bundle("gpu-01", [ok]).outcome == "remediated"
