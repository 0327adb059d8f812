"""`remediate bench` on sandbox hosts: the incident's long-context sweep at exact token counts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from remediate.host.bench import BenchOptions, bench_host
from remediate.transport.base import SSHOptions
from remediate.transport.ssh import SSHTransport

from .conftest import Node

pytestmark = pytest.mark.e2e

# Slow enough that decode time dominates the SSH round trips, fast enough for a test: a 185k prompt
# takes 74 simulated seconds to prefill → 0.74 s here.
BENCH_KNOBS = {"time_scale": 0.01, "load_s": 100, "warmup_s": 10}
CONTEXTS = (1024, 8192, 32768, 189440, 200000)


@pytest.fixture
def bench_node(node: Node) -> Node:
    node.host.set_standin(**BENCH_KNOBS)
    return node


@pytest.fixture
def transport(bench_node: Node) -> Iterator[SSHTransport]:
    t = SSHTransport(bench_node.host.name, SSHOptions(ssh_config=str(bench_node.fleet.ssh_config)))
    try:
        yield t
    finally:
        t.close()


def test_sweep_on_the_remediated_host(bench_node: Node, transport: SSHTransport) -> None:
    node = bench_node
    node.install_incident()
    fixed = node.cli("oom", "--timeout", "60")
    assert fixed.returncode == 0, fixed
    bench = bench_host(transport, BenchOptions(contexts=CONTEXTS, gen=24), label=node.host.name)
    assert bench.ok and bench.error is None, bench.to_dict()
    assert bench.limits.max_total_num_tokens == 195011
    by_len = {p.requested: p for p in bench.points}
    measured = [by_len[n] for n in CONTEXTS[:-1]]
    for point in measured:
        assert point.status == "ok", point
        assert point.prompt_tokens == point.requested and point.cached_tokens == 0, point
        assert point.runs[0].completion_tokens == 24
    decode = [p.summary("decode").median for p in measured]
    assert all(d is not None for d in decode)
    assert decode == sorted(decode, reverse=True), decode  # decode tok/s falls with context
    skipped = by_len[200000]
    assert skipped.status == "skipped" and "max_req_input_len 195,005" in skipped.note


def test_sweep_on_the_unremediated_host_stops_at_the_crash(bench_node: Node, transport: SSHTransport) -> None:
    node = bench_node
    node.install_incident()
    bench = bench_host(transport, BenchOptions(contexts=(1024, 8192, 32768, 65536), gen=8), label=node.host.name)
    assert not bench.ok
    assert [p.status for p in bench.points] == ["ok", "ok", "failed"], bench.to_dict()
    assert bench.error is not None and "the server died at 32,768 tokens" in bench.error
    assert f"remediate diagnose {node.host.name}" in bench.error
    assert any("OutOfMemoryError" in line for line in bench.journal), bench.journal
