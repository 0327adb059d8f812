"""The Prometheus alerting rules the project ships (examples/prometheus/remediate-rules.yml): `promtool check
rules` accepts them, `promtool test rules` fires each alert from series named as the watcher exports them, and
every metric (and label) a rule reads is one the watcher's own /metrics really has (fleet/watch/metrics.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from remediate.fleet.watch.metrics import HOST_STATES, WatchMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "examples" / "prometheus" / "remediate-rules.yml"
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_IDENT = re.compile(r"[a-zA-Z_:][\w:]*")
_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset"}


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: Debian's `prometheus` package has it (make system-deps installs it)"
    return path


def _rules() -> list[dict[str, object]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def _exported() -> dict[str, set[str]]:
    """Each sample name of the watcher's exposition → its label names (every metric observed once)."""
    metrics = WatchMetrics()
    metrics.observe_event({"event": "detected", "host": "gpu-1"})
    metrics.observe_event({"event": "outcome", "outcome": "rolled_back"})
    metrics.observe_round({"gpu-1": "needs_human"}, breaker_open=True)
    metrics.poll.observe(0.1)
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.text()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def _selectors(expr: str) -> list[tuple[str, set[str]]]:
    """The metric names an expression reads, each with the label names its matchers use (functions, keywords
    and label values left out)."""
    found: list[tuple[str, set[str]]] = []
    text = re.sub(r"\[[^\]]*\]", "", _STRING.sub('""', expr))  # strings and range durations ([5m]) out
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*(\()?", text):
        name, matchers, call = match.group(1), match.group(2), match.group(3)
        if call or name in _PROMQL_WORDS:
            continue
        labels = set(_IDENT.findall(re.sub(r"=~?|!~?|\"\"|,", " ", matchers[1:-1]))) if matchers else set()
        found.append((name, labels))
    return found


def test_promtool_check_rules_passes() -> None:
    checked = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in checked.stdout


def test_each_rule_reads_only_metrics_and_labels_the_watcher_exports() -> None:
    exported = _exported()
    for rule in _rules():
        expr = str(rule["expr"])
        selectors = _selectors(expr)
        metrics = [n for n, _ in selectors if n.startswith("remediate_")]
        assert metrics, f"{rule['alert']}: reads no remediate_ metric"
        for name, labels in selectors:
            assert name in exported, f"{rule['alert']}: {name} is not exported (have {sorted(exported)})"
            assert labels <= exported[name], f"{rule['alert']}: {name} has no label {labels - exported[name]}"
    for state in re.findall(r'state="(\w+)"', RULES.read_text()):
        assert state in HOST_STATES


def test_the_metric_check_does_catch_a_metric_the_watcher_does_not_export() -> None:
    assert ("sglang_cuda_oom_total", set()) in _selectors("increase(sglang_cuda_oom_total[5m]) > 0")
    assert "sglang_cuda_oom_total" not in _exported()
    assert _selectors('remediate_watch_hosts{state="needs_human"} > 0') == [("remediate_watch_hosts", {"state"})]


def test_each_alert_fires_on_series_named_as_the_watcher_exports_them(tmp_path: Path) -> None:
    """``promtool test rules``: each alert fires on the series it is meant for (and stays quiet before). The
    rules as shipped less their annotations (promtool would compare the rendered texts too)."""
    shipped = yaml.safe_load(RULES.read_text())
    for group in shipped["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(shipped))
    tests = {
        "rule_files": [str(tmp_path / "rules.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": 'remediate_watch_crashes_total{host="gpu-1"}', "values": "0 0 1 1 1"},
                    {"series": 'remediate_watch_hosts{state="needs_human"}', "values": "0 0 1 1 1"},
                    {"series": "remediate_watch_breaker_open", "values": "0 0 1 1 1"},
                    {"series": 'remediate_watch_fixes_total{outcome="rolled_back"}', "values": "0 0 1 1 1"},
                ],
                "alert_rule_test": [
                    *({"eval_time": "1m", "alertname": rule["alert"], "exp_alerts": []} for rule in _rules()),
                    {
                        "eval_time": "4m",
                        "alertname": "RemediateUnitCrashed",
                        "exp_alerts": [{"exp_labels": {"severity": "warning", "host": "gpu-1"}}],
                    },
                    {
                        "eval_time": "4m",
                        "alertname": "RemediateHostNeedsHuman",
                        "exp_alerts": [{"exp_labels": {"severity": "critical", "state": "needs_human"}}],
                    },
                    {
                        "eval_time": "4m",
                        "alertname": "RemediateBreakerOpen",
                        "exp_alerts": [{"exp_labels": {"severity": "critical"}}],
                    },
                    {
                        "eval_time": "4m",
                        "alertname": "RemediateFixFailed",
                        "exp_alerts": [{"exp_labels": {"severity": "warning", "outcome": "rolled_back"}}],
                    },
                ],  # fmt: skip
            }
        ],
    }
    path = tmp_path / "rules-test.yml"
    path.write_text(yaml.safe_dump(tests))
    ran = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr


@pytest.mark.parametrize("bad", ["remediate_watch_crashes_total[5m", "nonsense("])
def test_promtool_does_refuse_a_broken_rule(bad: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"alert": "X", "expr": bad}]}]}))
    checked = subprocess.run([_promtool(), "check", "rules", str(broken)], capture_output=True, text=True, timeout=60)
    assert checked.returncode != 0
