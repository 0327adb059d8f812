"""`remediate bench` through click with FakeTransports injected via ctx.obj: documents, files, exit codes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_transport import FakeTransport, Pieces, exec_start_value, probe_output, state_output

from remediate.cli import cli
from remediate.errors import ConnectError
from remediate.fleet.inventory import HostEntry
from remediate.transport.base import SSHOptions

UNIT = "sglang.service"
ARGV = ["/opt/sglang/bin/python3", "-m", "sglang.launch_server", "--host", "0.0.0.0", "--port", "30000"]


def sse(body: bytes) -> Pieces:
    req = json.loads(body)
    n, gen = len(req["input_ids"]), req["sampling_params"]["max_new_tokens"]
    pieces = []
    for i in range(1, gen + 1):
        meta = {"prompt_tokens": n, "completion_tokens": i, "cached_tokens": 0, "finish_reason": None}
        pieces.append((n / 8000 + (i - 1) * n / 1e6, b"data: " + json.dumps({"text": "w", "meta_info": meta}).encode()))
    return [(t, data + b"\n\n") for t, data in pieces] + [(pieces[-1][0], b"data: [DONE]\n\n")]


def host(name: str) -> FakeTransport:
    props = {"FragmentPath": f"/etc/systemd/system/{UNIT}", "ExecStart": exec_start_value(ARGV)}
    props |= {"ActiveState": "active", "SubState": "running", "MainPID": 42, "NRestarts": 0}
    fake = FakeTransport(name)
    fake.on(r"# remediate probe", probe_output(UNIT, props, {}, candidates=[UNIT]))
    fake.on(r"\Asystemctl show", state_output())
    fake.http("/server_info", (200, json.dumps({"max_total_num_tokens": 195011, "max_req_input_len": 195005})))
    fake.http("/flush_cache", (200, "Cache flushed.\n"))
    fake.http("/health", 200)
    fake.stream("/generate", sse)
    return fake


def invoke(args: list[str], fakes: dict[str, FakeTransport], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    order: list[str] = []

    def factory(entry: HostEntry, options: SSHOptions) -> FakeTransport:
        order.append(entry.name)
        return fakes[entry.name]

    result = CliRunner(env=env).invoke(cli, args, obj={"transport_factory": factory}, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_json_document_files_and_one_host_after_another(tmp_path: Path) -> None:
    fakes = {"a": host("a"), "b": host("b")}
    args = ["bench", "a", "b", "--contexts", "1k,8k,200k", "--gen", "4", "--seed", "3", "--json"]
    args += ["--output", "out.jsonl", "--csv", "out.csv", "--plot", "out.png"]
    code, out, _ = invoke(args, fakes)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["seed"] == 3 and [r["host"] for r in doc["results"]] == ["a", "b"]
    first = doc["results"][0]
    assert first["unit"] == UNIT and first["max_total_num_tokens"] == 195011
    assert [(p["requested"], p["status"]) for p in first["points"]] == [(1024, "ok"), (8192, "ok"), (204800, "skipped")]
    point = first["points"][0]
    assert set(point) >= {"requested", "prompt_tokens", "cached_tokens", "ttft_s", "prefill_tok_s", "decode_tok_s"}
    assert point["ttft_s"] == 0.128 and point["decode_wall_s"] == pytest.approx(3 * 1024 / 1e6, abs=1e-4)
    for fake in fakes.values():  # every host got its own connection, closed at its end
        assert fake.opened == 1 and fake.closed == 1
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(r["host"], r["requested"]) for r in lines][:3] == [("a", 1024), ("a", 8192), ("a", 204800)]
    assert len(lines) == 6 and all(r["seed"] == 3 and r["random_output_len"] == 4 for r in lines)
    rows = list(csv.DictReader((tmp_path / "out.csv").read_text().splitlines()))
    assert len(rows) == 6 and rows[0]["host"] == "a" and rows[0]["prompt_tokens"] == "1024"
    assert (tmp_path / "out.png").read_bytes()[:4] == b"\x89PNG"


def test_table_and_log_lines(tmp_path: Path) -> None:
    code, out, err = invoke(["bench", "a", "--contexts", "1k,200k", "--runs", "2", "--gen", "3"], {"a": host("a")})
    assert code == 0
    assert "requested" in out and "TTFT p90 s" in out and "1,024" in out and "skipped" in out
    assert "a 1,024 tokens ok TTFT 0.128s" in err and "a 204,800 tokens skipped" in err


def test_progress_bar_on_a_terminal() -> None:
    code, out, err = invoke(["bench", "a", "--contexts", "1k,2k"], {"a": host("a")}, env={"FORCE_COLOR": "1"})
    assert code == 0 and "2,048" in out
    assert "tokens ok TTFT" not in err  # the bar replaces the log lines
    assert "2/2" in err and "elapsed" in err and "ETA" in err


def test_unreachable_host_exits_3_and_the_next_host_still_runs() -> None:
    down = host("down")
    down.open_error = ConnectError("down", "connection refused")
    fakes = {"down": down, "up": host("up")}
    code, out, _ = invoke(["bench", "down", "up", "--contexts", "1k", "--json"], fakes)
    results = json.loads(out)["results"]
    assert code == 3  # the only failure is an unreachable host
    assert results[0]["error"] == "down: connection refused" and results[1]["points"][0]["status"] == "ok"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--contexts", "8kb"], "remediate: --contexts: bad context length '8kb'"),
        (["--contexts", ""], "remediate: --contexts: no context lengths given"),
        (["--output", "missing/x.jsonl"], "remediate: --output: missing/x.jsonl: directory"),
        (["--gen", "0"], "Invalid value for '--gen'"),
    ],
)
def test_bad_input_exits_2_and_contacts_no_host(args: list[str], message: str) -> None:
    fake = host("a")
    code, _, err = invoke(["bench", "a", *args], {"a": fake})
    assert code == 2 and message in err, err
    assert fake.opened == 0
