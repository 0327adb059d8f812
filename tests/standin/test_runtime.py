"""The stand-in serving: which settings survive which prompt, neighbours, KV exhaustion, bench-facing details."""

from __future__ import annotations

import http.client
import json
import re
import signal
import threading
import urllib.error
import urllib.request

import pytest

from tests.support.standin_proc import CAPACITY_RE, INCIDENT, Server

pytestmark = pytest.mark.integration

EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
BASE = INCIDENT[:-1]  # everything but the fraction


def _gen(srv: Server, n: int, new: int = 4, first: int = 1, timeout: float = 30) -> tuple[int, dict]:
    ids = [first + (i % 900) for i in range(n)]
    code, body = srv.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": new}}, timeout)
    return code, json.loads(body) if code in (200, 400) else {}


def _dies_on(srv: Server, n: int) -> None:
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        _gen(srv, n, first=601)  # a prefix no earlier prompt shares: nothing cached
    assert srv.wait_exit() == -signal.SIGKILL


def test_094_with_chunking_and_expandable_survives_what_kills_094(start) -> None:
    srv = start([*BASE, "0.94", "--chunked-prefill-size", "4096"], env=EXPANDABLE)
    srv.wait_healthy()
    for i in range(4):
        assert _gen(srv, 2000, first=10 + i)[0] == 200
    for n in (32768, 185_000, 32768):
        code, body = _gen(srv, n, first=n % 500)
        assert code == 200 and body["meta_info"]["prompt_tokens"] == n
    assert srv.proc.poll() is None and "OutOfMemoryError" not in srv.output()


def test_incident_crash_is_logged_by_every_rank(start) -> None:
    srv = start([*BASE, "0.94"])
    srv.wait_healthy()
    assert _gen(srv, 2000)[0] == 200 and _gen(srv, 2000, first=3)[0] == 200
    _dies_on(srv, 32768)
    out = srv.output()
    for r in range(8):
        assert re.search(
            rf"TP{r}\] Scheduler hit an exception: Traceback.*?\ntorch\.OutOfMemoryError: CUDA out of memory\. "
            rf"Tried to allocate 896\.00 MiB\. GPU {r} has a total capacity of 94\.97 GiB of which [\d.]+ MiB is "
            r"free\. "
            r"Including non-PyTorch memory, this process has [\d.]+ GiB memory in use\. Of the allocated memory "
            r"[\d.]+ GiB is allocated by PyTorch, with 1\.12 GiB allocated in private pools \(e\.g\., CUDA Graphs\), "
            r"and 716\.\d\d MiB is reserved by PyTorch but unallocated\.",
            out,
            re.S,
        ), r


@pytest.mark.parametrize(
    ("mfs", "chunk", "env", "fresh_32k_survives"),
    [
        ("0.95", "-1", {}, False),  # chunking off at a high fraction: the 32k probe dies on a fresh server
        ("0.95", "4096", EXPANDABLE, False),  # 0.08 GB of headroom fits no 4096-token chunk (112 MiB) either
        ("0.94", "-1", {}, True),  # a fresh 0.94 survives one 32k prompt (the incident needed load first)
    ],
)
def test_the_probe_on_a_fresh_server(start, mfs: str, chunk: str, env: dict, fresh_32k_survives: bool) -> None:
    srv = start([*BASE, mfs, "--chunked-prefill-size", chunk], env=env)
    srv.wait_healthy()
    if fresh_32k_survives:
        assert _gen(srv, 32768)[0] == 200
    else:
        _dies_on(srv, 32768)
        assert "Tried to allocate" in srv.output()


def test_a_neighbour_arriving_at_runtime_kills_the_next_prefill(start) -> None:
    srv = start([*BASE, "0.93", "--chunked-prefill-size", "4096"], env=EXPANDABLE)
    srv.wait_healthy()
    assert _gen(srv, 8000)[0] == 200
    srv.set_knobs(neighbour={"pid": 31337, "gib": 2.0, "gpus": [5]})
    procs = srv.smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").stdout
    assert "31337, 2048" in procs
    _dies_on(srv, 8000)
    out = srv.output()
    # NVML lists the processes by pid, and torch prints them in that order: which line comes first depends on
    # whether the server's pid is below the neighbour's (it is not, late in a long test run).
    ours = r"Including non-PyTorch memory, this process has [\d.]+ GiB memory in use\. "
    theirs = r"Process 31337 has 2\.00 GiB memory in use\. "
    procs = ours + theirs if srv.proc.pid < 31337 else theirs + ours
    assert re.search(
        r"TP5\] Scheduler hit an exception: .*?GPU 5 has a total capacity of 94\.97 GiB of which [\d.]+ \w+ is free\. "
        + procs
        + "Of the allocated",
        out,
        re.S,
    )
    assert "TP0] Scheduler hit an exception" not in out  # only GPU 5 lost its headroom


def _stream(srv: Server, n: int, new: int, started: threading.Event, result: dict) -> None:
    ids = [7 + (i % 800) for i in range(n)]
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new, "ignore_eos": True}, "stream": True}
    req = urllib.request.Request(srv.url + "/generate", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            r.readline()
            started.set()
            result["rest"] = r.read().decode()
    except (OSError, http.client.HTTPException) as exc:  # the server died mid-stream
        result["error"] = exc
    started.set()


def _long_request(srv: Server, n: int, new: int) -> tuple[threading.Thread, dict]:
    started, result = threading.Event(), {}
    t = threading.Thread(target=_stream, args=(srv, n, new, started, result), daemon=True)
    t.start()
    assert started.wait(30)
    return t, result


def test_kv_pool_exhaustion_crashes_with_sglangs_counts(start) -> None:
    srv = start([*BASE, "0.93", "--max-total-tokens", "20000"], {"kv_admission": "crash", "decode_scale": 200})
    srv.wait_healthy()
    assert "max_total_num_tokens=20000" in srv.output()
    first, _ = _long_request(srv, 12000, 2000)
    code, body = srv.post("/flush_cache", {})
    assert code == 400 and b"When there are running or waiting requests" in body
    _dies_on(srv, 9000)
    first.join(30)
    out = srv.output()
    m = re.search(
        r"TP0\] Prefill out of memory\. Try to lower your batch size\.\nTry to allocate 9000 tokens\.\n"
        r"Available tokens: (\d+) \(available_size=(\d+) \+ evictable_size=(\d+)\)\n",
        out,
    )
    assert m and int(m.group(1)) == int(m.group(2)) + int(m.group(3)) < 9000
    assert "\nRuntimeError: Prefill out of memory. Try to lower your batch size.\n" in out


def test_decode_exhaustion(start) -> None:
    srv = start([*BASE, "0.93", "--max-total-tokens", "20000"], {"kv_admission": "crash", "decode_scale": 20})
    srv.wait_healthy()
    _long_request(srv, 12000, 4000)
    second, _ = _long_request(srv, 7000, 4000)
    assert srv.wait_exit(30) == -signal.SIGKILL
    out = srv.output()
    assert re.search(r"TP0\] Decode out of memory\. Try to lower your batch size\.\nTry to allocate 1 tokens\.\n", out)


def test_queue_admission_waits_for_room(start) -> None:
    srv = start([*BASE, "0.93", "--max-total-tokens", "20000"], {"decode_scale": 50})
    srv.wait_healthy()
    first, result = _long_request(srv, 12000, 300)
    code, body = _gen(srv, 9000, timeout=60)  # admitted once the first one finished
    first.join(30)
    assert code == 200 and body["meta_info"]["prompt_tokens"] == 9000 and "rest" in result
    assert "out of memory" not in srv.output()


def test_bench_facing_details(start) -> None:
    srv = start([*BASE, "0.93", "--chunked-prefill-size", "4096"], {"api_version": "0.5.23"}, env=EXPANDABLE)
    srv.wait_healthy()
    code, body = srv.get("/model_info")
    info = json.loads(body)
    assert (
        code == 200
        and info["model_type"] == "kimi_k25"
        and info["architectures"] == ["KimiK25ForConditionalGeneration"]
    )
    assert "vocab_size" not in info  # the Python frontend does not say; the Rust one does
    code, body = _gen(srv, 10, first=163_839)
    assert code == 400 and body["error"]["message"].endswith("contains values greater than the vocab size (163840).")
    code, body = _gen(srv, 262_000, new=200)
    assert code == 400 and body["error"]["message"].startswith(
        "Requested token count exceeds the model's maximum context length of 262144 tokens. You requested a total "
        "of 262200 tokens: 262000 tokens from the input messages and 200 tokens for the completion."
    )
    code, body = _gen(srv, 195_000, new=24)  # under max_req_input_len: output clipped to what the pool holds
    assert code == 200 and body["meta_info"]["completion_tokens"] == 195_010 - 195_000 - 1
    code, body = _gen(srv, 1000, new=3, first=5)
    code2, body2 = _gen(srv, 1000, new=3, first=5)
    assert body2["meta_info"]["cached_tokens"] == 999
    assert srv.post("/flush_cache", {})[0] == 200
    assert _gen(srv, 1000, new=3, first=5)[1]["meta_info"]["cached_tokens"] == 0


def test_rust_frontend_model_info(start) -> None:
    srv = start([*BASE, "0.93"], env={"SGLANG_RUST_SERVER": "1"})
    srv.wait_healthy()
    info = json.loads(srv.get("/model_info")[1])
    assert info["vocab_size"] == 163840 and info["max_context_length"] == 262144
    assert info["max_req_input_len"] == 195005 == int(CAPACITY_RE.search(srv.output()).group(1)) - 6


def test_request_slots_exhaustion(start) -> None:
    srv = start([*BASE, "0.93", "--max-running-requests", "1"], {"kv_admission": "crash", "decode_scale": 200})
    srv.wait_healthy()
    _long_request(srv, 2000, 1000)
    _dies_on(srv, 100)
    assert re.search(
        r"TP0\] Scheduler hit an exception: Traceback.*?\nRuntimeError: alloc_req_slots runs out of memory\. Please "
        r"set a smaller number for `--max-running-requests`\. self\.req_to_token_pool\.available_size\(\)=0, "
        r"num_reqs=1, \n",
        srv.output(),
        re.S,
    )


@pytest.mark.parametrize(
    ("version", "who", "sigquit"),
    [
        (
            "0.4.10.post2",
            "TpModelWorkerClient",
            "Received sigquit from a child process. It usually means the child failed.",
        ),
        ("0.5.3", "TpModelWorkerClient", "SIGQUIT received. signum=3, frame=<"),
        ("0.5.23", "Scheduler", "SIGQUIT received. signum=3, frame=<"),
    ],
)
def test_the_crash_in_each_versions_words(start, version: str, who: str, sigquit: str) -> None:
    srv = start([*BASE, "0.95"], env={"SGLANG_STANDIN_VERSION": version})
    srv.wait_healthy()
    _dies_on(srv, 32768)
    out = srv.output()
    assert f"TP0] {who} hit an exception: Traceback (most recent call last):" in out and sigquit in out
    if who == "TpModelWorkerClient":
        assert "tp_worker_overlap_thread.py" in out and "Scheduler hit an exception" not in out


@pytest.mark.parametrize(
    ("style", "text"),
    [
        (
            "cuda_error",
            "\ntorch.AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in ",
        ),
        ("flashinfer", "\nRuntimeError: Failed to allocate memory for batch_prefill_tmp_v with size 939524096 and "),
        ("illegal_access", "\ntorch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"),
    ],
)
def test_oom_styles(start, style: str, text: str) -> None:
    srv = start([*BASE, "0.95"], {"oom_style": style})
    srv.wait_healthy()
    _dies_on(srv, 32768)
    out = srv.output()
    assert text in out and "torch.OutOfMemoryError" not in out and "TP0] Scheduler hit an exception:" in out
