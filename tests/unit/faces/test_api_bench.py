"""`remediate bench` through the Python API with FakeTransports injected, its rendering and files, and the
CLI's bad-input paths (no host contacted). The CLI against real hosts is in tests/e2e/test_bench.py."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from remediate import api
from remediate.cli import cli
from remediate.cli.render import bench as render_bench
from remediate.core.bench.record import RunArgs
from remediate.errors import ConnectError
from remediate.fleet import bench as fleet_bench
from remediate.fleet import bench_files
from remediate.fleet.inventory import HostEntry
from remediate.host.bench.bench import BenchOptions
from remediate.transport.base import SSHOptions
from tests.support.fake_transport import FakeTransport, Pieces
from tests.support.hosts import bench_ready_host

UNIT = "sglang.service"


def sse(body: bytes) -> Pieces:
    req = json.loads(body)
    n, gen = len(req["input_ids"]), req["sampling_params"]["max_new_tokens"]
    pieces = []
    for i in range(1, gen + 1):
        meta = {"prompt_tokens": n, "completion_tokens": i, "cached_tokens": 0, "finish_reason": None}
        pieces.append((n / 8000 + (i - 1) * n / 1e6, b"data: " + json.dumps({"text": "w", "meta_info": meta}).encode()))
    return [(t, data + b"\n\n") for t, data in pieces] + [(pieces[-1][0], b"data: [DONE]\n\n")]


def host(name: str) -> FakeTransport:
    fake = bench_ready_host(name, info={"max_total_num_tokens": 195011, "max_req_input_len": 195005}, MainPID=42)
    fake.stream("/generate", sse)
    return fake


class Recorder:
    """A SweepProgress that writes down what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def host(self, entry: HostEntry, index: int, count: int) -> None:
        self.events.append(("host", (entry.name, index, count)))

    def request(self, host: str, requested: int, run: int) -> None:
        self.events.append(("request", (host, requested, run)))

    def point(self, bench: object, point: object) -> None:
        self.events.append(("point", getattr(point, "requested", None)))


def run(targets: list[str], fakes: dict[str, FakeTransport], **options: object) -> list:  # type: ignore[type-arg]
    opened: list[str] = []

    def factory(entry: HostEntry, ssh: SSHOptions) -> FakeTransport:
        opened.append(entry.name)
        return fakes[entry.name]

    progress = Recorder()
    args = {"contexts": (1024, 8192, 204800), "gen": 4, "seed": 3, **options}
    options = BenchOptions(**args)  # type: ignore[arg-type]
    request = fleet_bench.BenchRequest(RunArgs(options.contexts, options.gen), options, targets=tuple(targets))
    results = api.bench(request, progress=progress, transport_factory=factory)
    assert opened == targets
    return [results, progress]


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./inventory.yaml


def test_hosts_one_after_another_with_progress_and_document() -> None:
    fakes = {"a": host("a"), "b": host("b")}
    results, progress = run(["a", "b"], fakes)
    assert [r.host for r in results] == ["a", "b"] and fleet_bench.bench_exit_code(results) == 0
    assert progress.events[:3] == [("host", ("a", 0, 2)), ("request", ("a", 1024, 1)), ("point", 1024)]
    assert ("host", ("b", 1, 2)) in progress.events and progress.events.count(("point", 204800)) == 2
    for fake in fakes.values():
        assert fake.opened == 1 and fake.closed == 1
    out = io.StringIO()
    render_bench.bench_report(Console(file=out, width=200), results, RunArgs((1024,), 4, seed=3), as_json=True)
    doc = json.loads(out.getvalue())
    assert doc["seed"] == 3
    first = doc["results"][0]
    assert first["unit"] == UNIT and first["max_total_num_tokens"] == 195011
    assert [(p["requested"], p["status"]) for p in first["points"]] == [(1024, "ok"), (8192, "ok"), (204800, "skipped")]
    point = first["points"][0]
    assert point["prompt_tokens"] == 1024 and point["cached_tokens"] == 0 and point["ttft_s"] == 0.128
    assert point["decode_wall_s"] == pytest.approx(3 * 1024 / 1e6, abs=1e-4)


def test_table_progress_bar_and_log_lines() -> None:
    results, _ = run(["a"], {"a": host("a")}, runs=2)
    out = io.StringIO()
    render_bench.bench_report(Console(file=out, width=200), results, RunArgs((1024,), 4, runs=2), as_json=False)
    text = out.getvalue()
    for heading in ("requested", "actual", "TTFT s", "prefill tok/s", "decode tok/s", "decode wall s", "status"):
        assert heading in text
    assert "TTFT p99 s" in text and "max_total_num_tokens 195,011" in text and "204,800: 204,800 tokens ≥" in text
    log = io.StringIO()
    with render_bench.BenchProgress(Console(file=log, width=200), points_per_host=1) as bar:
        bar.point(results[0], results[0].points[0])
    assert log.getvalue() == "a 1,024 tokens ok TTFT 0.128s decode 976.6 tok/s\n"
    tty = io.StringIO()
    with render_bench.BenchProgress(Console(file=tty, width=120, force_terminal=True), points_per_host=2) as bar:
        bar.host(HostEntry("a", "a"), 0, 1)
        bar.request("a", 1024, 1)
        bar.point(results[0], results[0].points[0])
        bar.point(results[0], results[0].points[1])
    assert "2/2" in tty.getvalue() and "elapsed" in tty.getvalue() and "ETA" in tty.getvalue()
    assert "tokens ok TTFT" not in tty.getvalue()  # the bar replaces the log lines


def test_files(tmp_path: Path) -> None:
    results, _ = run(["a"], {"a": host("a")})
    args = RunArgs((1024, 8192, 204800), 4, seed=3)
    request = fleet_bench.BenchRequest(
        args, BenchOptions(args.contexts), output="out.jsonl", csv_path="out.csv", plot="out.png"
    )
    bench_files.write_outputs(results, request, version="9.9")
    bench_files.write_outputs(
        results, fleet_bench.BenchRequest(args, request.options, output="out.jsonl"), version="9.9"
    )
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["requested"] for r in lines] == [1024, 8192, 204800] * 2  # appended
    assert lines[0]["version"] == "9.9" and lines[0]["seed"] == 3 and lines[0]["random_output_len"] == 4
    rows = list(csv.DictReader((tmp_path / "out.csv").read_text().splitlines()))
    assert [r["status"] for r in rows] == ["ok", "ok", "skipped"] and rows[0]["prompt_tokens"] == "1024"
    assert (tmp_path / "out.png").read_bytes()[:4] == b"\x89PNG"


def test_an_unreachable_host_exits_3_and_the_next_host_still_runs() -> None:
    down = host("down")
    down.open_error = ConnectError("down", "connection refused")
    results, _ = run(["down", "up"], {"down": down, "up": host("up")})
    assert results[0].error == "down: connection refused" and results[1].points[0].status == "ok"
    assert fleet_bench.bench_exit_code(results) == 3  # the only failure is an unreachable host


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--contexts", "8kb"], "remediate: --contexts: bad context length '8kb'"),
        (["--contexts", ""], "remediate: --contexts: no context lengths given"),
        (["--output", "missing/x.jsonl"], "remediate: --output: missing/x.jsonl: directory"),
        (["--gen", "0"], "Invalid value for '--gen'"),
    ],
)
def test_bad_input_exits_2_before_any_host(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["bench", "root@192.0.2.1", *args])  # TEST-NET: never contacted
    assert result.exit_code == 2 and message in result.stderr, result.stderr
