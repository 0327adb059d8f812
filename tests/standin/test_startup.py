"""The stand-in's startup as a planner and a diagnoser read it: per-rank lines, failures, the GPU board."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.standin_proc import CAPACITY_RE, FIX, INCIDENT, STANDIN

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandbox" / "standin"))

from sglang import memory  # noqa: E402

pytestmark = pytest.mark.integration

P = memory.KIMI_K26_TP8
RANK = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP(\d)\] "
BEGIN_RE = re.compile(RANK + r"Load weight begin\. avail mem=([\d.]+) GB$", re.M)
END_RE = re.compile(
    RANK + r"Load weight end\. type=KimiK25ForConditionalGeneration, dtype=torch\.bfloat16, "
    r"avail mem=([\d.]+) GB, mem usage=([\d.]+) GB\.$",
    re.M,
)
KV_RE = re.compile(RANK + r"KV Cache is allocated\. #tokens: (\d+), KV size: ([\d.]+) GB$", re.M)
GRAPH_END_RE = re.compile(
    RANK + r"Capture cuda graph end\. Time elapsed: [\d.]+ s\. mem usage=[\d.]+ GB\. "
    r"avail mem=([\d.]+) GB\.$",
    re.M,
)


def _per_rank(regex: re.Pattern[str], out: str) -> dict[int, tuple[str, ...]]:
    return {int(m.group(1)): m.groups()[1:] for m in regex.finditer(out)}


def predict(free0: float, free1: float, cell: int, mfs: float) -> int:
    """The README's formula, from logged numbers."""
    return int((free1 - free0 * (1 - mfs)) * (1 << 30) // cell)


def test_every_rank_logs_its_startup_and_a_planner_recovers_the_pool(start) -> None:
    srv = start(INCIDENT)
    srv.wait_healthy()
    out = srv.output()
    begin, end, kv, graph = (_per_rank(r, out) for r in (BEGIN_RE, END_RE, KV_RE, GRAPH_END_RE))
    assert set(begin) == set(end) == set(kv) == set(graph) == set(range(8))
    assert {v for v in kv.values()} == {("209007", "13.68")}
    capacity = [m for m in CAPACITY_RE.finditer(out)]
    assert len(capacity) == 1 and re.search(r"TP0\] max_total_num_tokens=209007", out)
    free0 = min(float(v[0]) for v in begin.values())
    free1 = min(float(v[0]) for v in end.values())
    assert (free0, free1) == (91.60, 19.17)
    assert len({v[0] for v in begin.values()}) > 1  # ranks differ: the planner must take the minimum
    cell_from_log = float(kv[0][1]) * (1 << 30) / 209007
    assert cell_from_log == pytest.approx(memory.kv_cell_bytes(P), rel=5e-4)
    for mfs in (0.85, 0.90, 0.92, 0.93, 0.94, 0.95):
        exact = memory.plan_memory(P, mfs).max_total_num_tokens
        assert predict(free0, free1, memory.kv_cell_bytes(P), mfs) == pytest.approx(exact, rel=1e-3)
    assert float(CAPACITY_RE.search(out).group(6)) == float(graph[0][0]) == 1.00


@pytest.mark.parametrize(
    ("version", "text"),
    [
        ("0.4.10.post2", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"),
        (
            "0.5.3",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: self.server_args.mem_fraction_static=0.75\n",
        ),
        (
            "0.5.6",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.75\n",
        ),
        (
            "0.5.23",
            "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.75. "
            "Raise --mem-fraction-static above 0.791 (minimum viable = 1 - available/pre = 0.7907). "
            "If using speculative decoding, draft weights are now counted.\n",
        ),
    ],
)
def test_low_fraction_dies_at_startup_in_the_versions_words(start, version: str, text: str) -> None:
    srv = start([*INCIDENT[:-1], "0.75"], env={"SGLANG_STANDIN_VERSION": version})
    assert srv.wait_exit() == 1
    out = srv.output()
    assert text in out
    assert re.search(r"TP0\] Scheduler hit an exception: Traceback \(most recent call last\):", out)
    assert "Load weight end." in out and "KV Cache is allocated" not in out and "Uvicorn running" not in out
    assert "RuntimeError: Initialization failed. Please see the error messages above." in out


def test_cuda_graph_max_bs_too_large_for_the_headroom(start) -> None:
    srv = start([*INCIDENT, "--cuda-graph-max-bs", "1200"])
    assert srv.wait_exit() == 1
    out = srv.output()
    assert "KV Cache is allocated. #tokens: 209007" in out and "Capture cuda graph begin." in out
    m = re.search(
        r"TP0\] Scheduler hit an exception: Traceback.*?\nException: Capture cuda graph failed: CUDA out of memory\. "
        r"Tried to allocate 448\.00 MiB\. GPU 0 has a total capacity of 94\.97 GiB of which ([\d.]+ MiB) is free\. "
        r".*?with ([\d.]+ [MG]iB) allocated in private pools \(e\.g\., CUDA Graphs\).*?\n"
        r"Possible solutions:\n1\. set --mem-fraction-static to a smaller value",
        out,
        re.S,
    )
    assert m, out[-3000:]
    cause = out.index("During handling of the above exception, another exception occurred:")
    assert out.index("\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 ") < cause
    assert "Capture cuda graph end" not in out and "Uvicorn running" not in out
    # 0.94 leaves room for graphs up to bs 1137; 0.93 for more
    assert memory.plan_memory(P, 0.94, cuda_graph_max_bs=1137).available > 0
    with pytest.raises(memory.GraphCaptureOOMError):
        memory.plan_memory(P, 0.94, cuda_graph_max_bs=1138)


def test_neighbour_on_one_gpu_shrinks_the_pool_and_shows_in_nvidia_smi(start) -> None:
    srv = start(FIX, {"neighbour": {"pid": 777, "gib": 6.5, "gpus": [3]}})
    srv.wait_healthy()
    out = srv.output()
    assert re.search(r"TP3\] Load weight begin\. avail mem=85\.13 GB", out)
    tokens = int(CAPACITY_RE.search(out).group(1))
    assert tokens == memory.plan_memory(P, 0.93, others_gib=(0, 0, 0, 6.5)).max_total_num_tokens < 195011
    gpu = srv.smi("--query-gpu=index,memory.total,memory.used", "--format=csv,noheader,nounits")
    rows = [[int(x) for x in line.split(", ")] for line in gpu.stdout.splitlines()]
    assert gpu.returncode == 0 and [r[0] for r in rows] == list(range(8)) and {r[1] for r in rows} == {97865}
    apps = srv.smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    procs = [tuple(int(x) for x in line.split(", ")) for line in apps.stdout.splitlines()]
    assert (777, 6656) in procs and sum(1 for p, _ in procs if p == srv.proc.pid) == 8
    server_mib = [u for p, u in procs if p == srv.proc.pid]
    assert rows[3][2] - rows[0][2] == 6656 + server_mib[3] - server_mib[0]
    assert rows[0][2] == server_mib[0] + 9  # nvidia-smi's used: the processes + a few MiB nobody owns
    # torch's capacity is memory.total less the driver's 616 MiB; what is free there is TP0's headroom
    # (available_gpu_mem of the capacity line: the smaller pool leaves more)
    free0_mib = 97865 - 616 - server_mib[0]
    assert free0_mib == pytest.approx(float(CAPACITY_RE.search(out).group(6)) * 1024, abs=6)
    table = srv.smi().stdout
    assert "NVIDIA-SMI" in table and f"{rows[3][2]}MiB / 97865MiB" in table and "  4242  " not in table
    assert re.search(r"\|\s+3\s+N/A\s+N/A\s+777\s+C\s+/usr/bin/python3\s+6656MiB \|", table)
    assert "used_gpu_memory [MiB]" in srv.smi("--query-compute-apps=pid,used_memory", "--format=csv").stdout
    bad = srv.smi("--query-gpu=index,bogus", "--format=csv")
    assert bad.returncode == 2 and 'Field "bogus" is not a valid field to query.' in bad.stdout


def test_neighbour_on_some_gpus_unbalances_tp(start) -> None:
    srv = start(FIX, {"neighbour": {"gib": 12, "gpus": [5]}})
    assert srv.wait_exit() == 1
    out = srv.output()
    assert re.search(
        r"TP0\] Scheduler hit an exception: .*\nValueError: The memory capacity is unbalanced\. Some GPUs may be "
        r"occupied by other processes\. min_per_gpu_memory=79\.6\d*, local_gpu_memory=91\.59\d*, "
        r"local_gpu_memory \* 0\.9=82\.4\d*\n",
        out,
        re.S,
    )
    assert "TP5] Scheduler hit an exception" not in out and "Load weight begin" not in out


def test_nvidia_smi_without_servers(tmp_path: Path) -> None:

    cfg = tmp_path / "k.json"
    cfg.write_text('{"gpu_state_dir": "%s", "gpus": 2}' % (tmp_path / "none"))
    env = {**os.environ, "SGLANG_STANDIN_CONFIG": str(cfg)}
    run = subprocess.run(
        [str(STANDIN / "bin" / "nvidia-smi"), "--query-gpu=index,memory.total,memory.used", "--format=csv"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.stdout == "index, memory.total [MiB], memory.used [MiB]\n0, 97865 MiB, 0 MiB\n1, 97865 MiB, 0 MiB\n"
    apps = subprocess.run(
        [str(STANDIN / "bin" / "nvidia-smi"), "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert (apps.returncode, apps.stdout) == (0, "")


def test_the_board_ignores_dead_and_reused_pids(tmp_path: Path) -> None:
    from sglang import gpus

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)
    for pid in (dead, os.getpid()):  # a crashed server's file; a PID now held by something that is not sglang
        (tmp_path / f"{pid}.json").write_text(json.dumps({"pid": pid, "used_bytes": [1 << 30]}))
    (tmp_path / "junk.json").write_text("{")
    assert gpus.read_board(str(tmp_path)) == []


def test_cuda_visible_devices_places_each_server_on_its_gpus(start) -> None:
    """Two TP8 servers on a 16-GPU host: the second on GPUs 8-15 (its CUDA_VISIBLE_DEVICES), where a neighbour
    on GPU 11 is its rank 3's; nvidia-smi lists each server's rows under its own GPUs' UUIDs."""
    knobs = {"gpus": 16, "neighbour": {"pid": 777, "gib": 6.5, "gpus": [11]}}
    low = start(FIX, knobs)
    high = start(FIX, knobs, env={"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in range(8, 16))})
    low.wait_healthy()
    high.wait_healthy()
    assert re.search(r"TP3\] Load weight begin\. avail mem=85\.13 GB", high.output())
    assert not re.search(r"TP3\] Load weight begin\. avail mem=85\.13 GB", low.output())
    gpu = high.smi("--query-gpu=index,uuid,memory.total,memory.used", "--format=csv,noheader,nounits")
    uuids = {int(i): u for i, u, _, _ in (line.split(", ") for line in gpu.stdout.splitlines())}
    assert sorted(uuids) == list(range(16)) and len(set(uuids.values())) == 16
    assert all(
        re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", u) for u in uuids.values()
    )
    apps = high.smi("--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits")
    on: dict[int, set[str]] = {}
    for line in apps.stdout.splitlines():
        pid, _, where = line.split(", ")
        on.setdefault(int(pid), set()).add(where)
    assert on == {low.proc.pid: {uuids[g] for g in range(8)}, high.proc.pid: {uuids[g] for g in range(8, 16)},
                  777: {uuids[11]}}  # fmt: skip


def test_rank_gpus_reads_cuda_visible_devices_as_cuda_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang import gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpus.rank_gpus(3) == (0, 1, 2)
    assert gpus.rank_gpus(2, f"{gpus.uuid(5)},4") == (5, 4)
    assert gpus.rank_gpus(4, "6,7,x,0") == (6, 7, 8, 9)  # CUDA stops at the first invalid entry
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert gpus.rank_gpus(1) == (3,)
