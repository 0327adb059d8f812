"""The stand-in as a subprocess: phases, endpoints, the incident crash, failure modes."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.support.standin_proc import CAPACITY_RE, FIX, INCIDENT, Server

pytestmark = pytest.mark.integration


def test_refused_then_503_then_200(start) -> None:
    srv = start(INCIDENT, {"time_scale": 0.002, "warmup_s": 150})
    with pytest.raises(urllib.error.URLError) as exc:
        srv.get("/health")
    assert isinstance(exc.value.reason, ConnectionRefusedError)
    seen: list[int] = []
    end = time.monotonic() + 10
    while time.monotonic() < end and (not seen or seen[-1] != 200):
        try:
            seen.append(srv.get("/health")[0])
        except urllib.error.URLError:
            pass
        time.sleep(0.01)
    assert 503 in seen and seen[-1] == 200
    out = srv.output()
    assert out.index("Uvicorn running on http://127.0.0.1:") < out.index("The server is fired up and ready to roll!")
    m = CAPACITY_RE.search(out)
    assert m and m.group(1) == "209007" and m.group(2) == "-1"
    assert re.search(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] KV Cache is allocated\. #tokens: 209007, KV size: 13\.68 GB", out
    )
    assert "server_args=ServerArgs(model_path='moonshotai/Kimi-K2.6'" in out


@pytest.mark.parametrize("api", ["0.5.3", "0.5.6"])
def test_server_info_modes(start, api: str) -> None:
    srv = start([*FIX, "--cuda-graph-max-bs=256"], {"api_version": api}, module="sglang.cli.main")
    srv.wait_healthy()
    code, body = srv.get("/get_server_info")
    info = json.loads(body)
    assert code == 200 and info["max_total_num_tokens"] == 195011 and info["status"] == "ready"
    assert info["internal_states"][0]["memory_usage"]["token_capacity"] == 195011
    assert info["mem_fraction_static"] == 0.93 and info["chunked_prefill_size"] == 4096
    assert info["max_req_input_len"] == 195005 and info["version"] == api
    assert "195011" in CAPACITY_RE.search(srv.output()).group(1)
    code_new, body_new = srv.get("/server_info")
    code_mi, _ = srv.get("/model_info")
    if api == "0.5.3":
        assert (code_new, code_mi) == (404, 404)
    else:
        assert code_new == 200 and json.loads(body_new)["max_total_num_tokens"] == 195011
        assert code_mi == 200
        assert "Endpoint '/get_server_info' is deprecated" in srv.output()


def test_generate_stream_and_flush(start) -> None:
    srv = start(FIX)
    srv.wait_healthy()
    req = urllib.request.Request(
        srv.url + "/generate",
        data=json.dumps(
            {
                "input_ids": list(range(1, 101)),
                "sampling_params": {"max_new_tokens": 5, "ignore_eos": True},
                "stream": True,
            }
        ).encode(),
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[len("data: ") :]) for e in events[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 5]
    assert all(c["meta_info"]["finish_reason"] is None and "e2e_latency" not in c["meta_info"] for c in chunks[:-1])
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 5} and last["e2e_latency"] >= 0
    assert last["prompt_tokens"] == 100 and last["cached_tokens"] == 0 and last["weight_version"] == "default"
    assert chunks[-1]["text"].startswith(chunks[0]["text"])
    code, body = srv.post("/generate", {"text": "a b c", "sampling_params": {"max_new_tokens": 2}})
    assert code == 200 and json.loads(body)["meta_info"]["completion_tokens"] == 2
    code, body = srv.get("/flush_cache")
    assert code == 200 and body.decode().startswith("Cache flushed.\nPlease check backend logs")
    code, body = srv.post("/generate", {"input_ids": [1] * 195_006, "sampling_params": {"max_new_tokens": 1}})
    assert code == 400
    assert json.loads(body)["error"]["message"] == (
        "Input length (195006 tokens) exceeds the maximum allowed length (195005 tokens). "
        "Use a shorter input or enable --allow-auto-truncate."
    )


def _load_then_32k(srv: Server) -> None:
    for i in range(2):
        code, _ = srv.post("/generate", {"input_ids": [i + 7] * 2000, "sampling_params": {"max_new_tokens": 8}})
        assert code == 200
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        srv.post("/generate", {"input_ids": [5] * 32768, "sampling_params": {"max_new_tokens": 8}})


def test_incident_crash_sigkills_itself(start) -> None:
    srv = start(INCIDENT)
    srv.wait_healthy()
    _load_then_32k(srv)
    assert srv.wait_exit() == -signal.SIGKILL
    out = srv.output()
    assert re.search(r"TP0\] Scheduler hit an exception: Traceback \(most recent call last\):", out)
    assert (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. "
        "GPU 0 has a total capacity of 94.97 GiB" in out
    )
    assert "SIGQUIT received. signum=3, frame=<" in out and "It usually means one child failed." in out


def test_fix_survives_32k_and_185k(start) -> None:
    srv = start(FIX, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    srv.wait_healthy()
    for i in range(2):
        assert srv.post("/generate", {"input_ids": [i + 7] * 2000, "sampling_params": {"max_new_tokens": 8}})[0] == 200
    for n in (32768, 185_000):
        code, body = srv.post("/generate", {"input_ids": [n % 997] * n, "sampling_params": {"max_new_tokens": 2}})
        assert code == 200 and json.loads(body)["meta_info"]["prompt_tokens"] == n
    assert srv.proc.poll() is None and "OutOfMemoryError" not in srv.output()


@pytest.mark.parametrize(("api", "end"), [("0.4.10.post2", -signal.SIGKILL), ("0.5.6", -signal.SIGKILL), ("0.5.23", 0)])
def test_sigterm_drains_then_ends_as_the_version_does(start, api: str, end: int) -> None:
    """sigterm_watchdog: the SIGTERM line, the drain's line(s), then before 0.5.23 a SIGKILL of itself
    (kill_process_tree(..., include_parent=True)), in 0.5.23 exit 0; quick (the drain tick is 5 s scaled)."""
    srv = start(FIX, {"api_version": api})
    srv.wait_healthy()
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.wait_exit() == end
    assert time.monotonic() - t0 < 0.5
    out = srv.output()
    assert "SIGTERM received. signum=15 frame=<frame at " in out and "Draining requests and shutting down..." in out
    if api.startswith("0.4"):
        assert "Gracefully exiting... remaining number of requests 0" in out
    else:
        assert "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[]." in out
    assert ("kill_process_tree called: parent_pid=" in out) == (api == "0.5.23")


def test_sigterm_drains_the_running_request_first(start) -> None:
    """The drain waits for a request in flight (its rid named on each tick) before the end."""
    srv = start([*FIX, "--log-requests"], {"decode_scale": 40})
    srv.wait_healthy()
    answered: list[int] = []
    body = {"text": "Main process exited, code=killed, status=9/KILL", "rid": "r-1"}
    body["sampling_params"] = {"max_new_tokens": 64}  # type: ignore[assignment]

    def send() -> None:
        try:
            answered.append(srv.post("/generate", body)[0])
        except OSError:  # the self-SIGKILL right after the drain may cut the answer, as sglang's own does
            answered.append(0)

    worker = threading.Thread(target=send)
    worker.start()
    end = time.monotonic() + 5
    while "Receive: obj=GenerateReqInput(" not in srv.output() and time.monotonic() < end:
        time.sleep(0.01)
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.wait_exit() == -signal.SIGKILL
    worker.join(10)
    out = srv.output()
    assert answered in ([200], [0])  # the request ran to its end before the kill (the drain's lines below)
    assert "Remaining number of requests 1. Remaining requests remaining_rids=['r-1']." in out
    assert "Receive: obj=GenerateReqInput(text='Main process exited, code=killed, status=9/KILL', input_ids=None" in out


def test_too_small_fraction_exits_nonzero(start) -> None:
    srv = start([*INCIDENT[:-1], "0.75"])
    assert srv.wait_exit() == 1
    assert (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.75" in srv.output()
    )


def test_failure_exit_at_once(start) -> None:
    srv = start(FIX, {"failure": "exit_at_once"})
    assert srv.wait_exit() == 1 and srv.output().strip()


def test_failure_crash_during_load(start) -> None:
    srv = start(FIX, {"failure": "crash_during_load"})
    assert srv.wait_exit() == 1
    out = srv.output()
    assert "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate" in out
    assert "Uvicorn running" not in out


def test_failure_never_healthy(start) -> None:
    srv = start(FIX, {"failure": "never_healthy"})
    end = time.monotonic() + 5
    while time.monotonic() < end and "Uvicorn running" not in srv.output():
        time.sleep(0.02)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        try:
            assert srv.get("/health")[0] == 503
        except urllib.error.URLError:
            pass
        time.sleep(0.05)
    assert "fired up" not in srv.output()


def test_failure_slow_load(start) -> None:
    srv = start(FIX, {"failure": "slow_load", "time_scale": 0.0004})
    t0 = time.monotonic()
    srv.wait_healthy()
    assert time.monotonic() - t0 >= 450 * 10 * 0.0004 * 0.9


def test_failure_match_applies_only_to_matching_command_lines(start) -> None:
    # The failure is armed for the remediated command line only: this one does not match, so it starts.
    srv = start(FIX, {"failure": "exit_at_once", "failure_match": "--mem-fraction-static 0.5"})
    srv.wait_healthy()
    other = start(FIX, {"failure": "exit_at_once", "failure_match": "--chunked-prefill-size 4096"})
    assert other.wait_exit() == 1


def _32k_in_the_background(srv: Server) -> threading.Thread:
    for i in range(2):
        code, _ = srv.post("/generate", {"input_ids": [i + 7] * 2000, "sampling_params": {"max_new_tokens": 8}})
        assert code == 200

    def prefill() -> None:
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            srv.post("/generate", {"input_ids": [5] * 32768, "sampling_params": {"max_new_tokens": 8}}, timeout=60)

    thread = threading.Thread(target=prefill)
    thread.start()
    return thread


def test_0523_at_tp8_lingers_in_its_sigquit_handler(start) -> None:
    """sglang 0.5.23 running_phase_sigquit_handler → dump_requests_before_crash: the settle, the live ranks'
    dumps, the coredump wait (65 simulated seconds, 3.25 s here), the HTTP server silent meanwhile, then
    kill_process_tree of itself."""
    srv = start(INCIDENT, {"api_version": "0.5.23", "time_scale": 0.05, "load_s": 20.0, "warmup_s": 1.0})
    srv.wait_healthy(deadline=60)
    prefill = _32k_in_the_background(srv)
    end = time.monotonic() + 30
    while "Waiting 60.0 seconds for CUDA coredumps before exiting." not in srv.output():
        assert time.monotonic() < end and srv.proc.poll() is None, srv.output()
        time.sleep(0.05)
    with pytest.raises(OSError):  # a timeout: the process is alive and the port open, nothing answers
        srv.get("/health", timeout=0.5)
    assert srv.proc.poll() is None
    assert srv.wait_exit(deadline=30) == -signal.SIGKILL
    prefill.join()
    out = srv.output()
    order = [
        "SIGQUIT received. signum=3",
        "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.",
        "All pyspy dump attempts failed for PID",
        "CUDA user-triggered coredump is not enabled.",
        "CUDA coredump pipe not found for PID",
        "Waiting 60.0 seconds for CUDA coredumps before exiting.",
        "kill_process_tree called:",
    ]
    assert [out.index(x) for x in order] == sorted(out.index(x) for x in order), out[-3000:]


@pytest.mark.parametrize(
    ("version", "env"),
    [("0.5.5", {}), ("0.5.23", {"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "false"})],
)
def test_before_0523_or_without_the_dumps_the_crash_exits_at_once(start, version: str, env: dict) -> None:
    srv = start(INCIDENT, {"api_version": version}, env=env)
    srv.wait_healthy()
    _load_then_32k(srv)
    assert srv.wait_exit() == -signal.SIGKILL
    assert "SIGQUIT received" in srv.output() and "Sleeping 5 seconds" not in srv.output()
