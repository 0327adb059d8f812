"""`oom --probe TOKENS` in the single-host runner: checked against the context before the commit; the
crashing prefill once healthy: a crash rolls back, any other failure is a warning."""

from __future__ import annotations

import json

from tests.support.fake_transport import FakeTransport, state_output
from tests.support.hosts import COMMIT, POLL, commit_ok, info, phases
from tests.support.hosts import oom_host as make_host
from tests.support.hosts import run_oom as run

SIZE = 32768


def sse(prompt: int, *, cut: bool = False) -> list[tuple[float, bytes]]:
    meta = {"prompt_tokens": prompt, "completion_tokens": 1, "cached_tokens": 0}
    done = {**meta, "finish_reason": {"type": "length", "length": 1}, "e2e_latency": 4.2}
    chunk = done if not cut else meta
    pieces = [(4.0, b"data: " + json.dumps({"text": "w", "meta_info": chunk}).encode() + b"\n\n")]
    return pieces if cut else [*pieces, (4.01, b"data: [DONE]\n\n")]


def healthy_host() -> FakeTransport:
    host = make_host()
    host.on(r"\Adate \+%s", "1764400100\n")
    host.http("/health", 200)
    host.http("/server_info", info(195011))
    host.http("/flush_cache", (200, "Cache flushed.\n"))
    return host


def test_probe_after_the_restart_succeeds() -> None:
    host = healthy_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.stream("/generate", lambda body: sse(len(json.loads(body)["input_ids"])))
    result = run(host, probe_tokens=SIZE)
    assert result.outcome == "remediated", result.error
    assert phases(result) == ["connect", "lock", "read", "plan", "commit", "wait", "probe", "verify"]
    assert result.probe is not None and result.probe.to_dict() == {
        "tokens": SIZE,
        "prompt_tokens": SIZE,
        "cached_tokens": 0,
        "ttft_s": 4.0,
        "prefill_tok_s": round(SIZE / 4.0, 1),
        "ok": True,
    }
    [generate] = [c for c in host.http_calls if c.path == "/generate"]
    body = json.loads(generate.body)
    assert len(body["input_ids"]) == SIZE and body["sampling_params"]["max_new_tokens"] == 1


def test_a_probe_that_kills_the_server_rolls_back_with_the_oom_lines() -> None:
    host = healthy_host()
    host.on(COMMIT, commit_ok(), commit_ok(invocation="inv-3", backup=False))
    host.on(
        POLL,
        state_output(invocation_id="inv-2"),  # the wait: healthy
        state_output(invocation_id="inv-2"),  # before the probe (prefill.run_probe)
        state_output(invocation_id="inv-2"),  # before the probe (bench.probe_prefill)
        state_output("activating", "auto-restart", result="signal", invocation_id="inv-2", main_pid=0),  # it died
        state_output("activating", "auto-restart", result="signal", invocation_id="inv-2", main_pid=0),  # still
        state_output(invocation_id="inv-3"),  # the restored server
    )
    host.stream("/generate", sse(SIZE, cut=True))
    result = run(host, probe_tokens=SIZE)
    assert result.outcome == "rolled_back" and result.exit_code == 1, result.error
    assert result.error is not None and "the probe prefill of 32,768 tokens failed" in result.error
    assert "auto-restart" in result.error and "rolled back to the previous unit" in result.error
    assert any("OutOfMemoryError" in line for line in result.journal[:1]), result.journal
    assert len(host.scripts("# remediate commit")) == 2  # the change, then the undo
    assert any("--since @1764400100" in c.command for c in host.ran(r"\Ajournalctl"))


def test_a_probe_longer_than_the_new_server_takes_is_a_warning_not_a_rollback() -> None:
    host = healthy_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.http("/server_info", (200, json.dumps({"max_total_num_tokens": 195011, "max_req_input_len": 195005})))
    result = run(host, probe_tokens=200_000)
    assert result.outcome == "remediated" and result.exit_code == 0, result.error
    assert result.probe is not None and result.probe.ok is False
    assert any("--probe 200,000 failed but the server did not crash" in w for w in result.warnings), result.warnings
    assert len(host.scripts("# remediate commit")) == 1, "no rollback"
    assert not [c for c in host.http_calls if c.path == "/generate"]


def test_a_probe_that_times_out_or_gets_a_503_while_the_server_lives_is_kept() -> None:
    host = healthy_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    host.stream("/generate", 503)
    result = run(host, probe_tokens=SIZE)
    assert result.outcome == "remediated", result.error
    assert len(host.scripts("# remediate commit")) == 1, "no rollback"
    assert result.probe is not None and result.probe.ok is False and "503" in (result.probe.error or "")


def test_a_probe_above_the_context_length_is_refused_before_the_commit() -> None:
    host = healthy_host()
    host.http("/server_info", (200, json.dumps({"max_total_num_tokens": 195011, "context_length": 131072})))
    result = run(host, probe_tokens=200_000)
    assert result.outcome == "failed" and result.exit_code == 2, result.error
    assert result.error == (
        "gpu-01: --probe 200,000 + 1 generated token exceeds the context length 131,072 "
        "(the running server's /server_info): no server can take it; nothing was changed"
    )
    assert not host.scripts("# remediate commit"), "nothing may be written"


def test_no_probe_without_probe_tokens() -> None:
    host = healthy_host()
    host.on(COMMIT, commit_ok())
    host.on(POLL, state_output(invocation_id="inv-2"))
    result = run(host)
    assert result.outcome == "remediated" and result.probe is None
    assert not [c for c in host.http_calls if c.method == "POST"]
