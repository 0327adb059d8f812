"""Edges of the diagnosis core the golden cases do not reach: flattened and chained tracebacks, the
command builder, fractions at their limits, GPU listings, and sizes."""

from __future__ import annotations

from remediate.core.diagnosis import AdvisorInput, Recommendation, advise, format_size, oom_command, parse_journal
from remediate.core.diagnosis.gpus import foreign_apps, parse_apps, parse_gpus, process_tree
from remediate.core.diagnosis.sizes import gib_to_bytes, parse_size

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 100.00 MiB is free. Of the allocated memory 77.00 GiB is allocated by PyTorch, and "
    "10.00 MiB is reserved by PyTorch but unallocated."
)


def test_flattened_traceback_on_one_prefixed_line_keeps_its_rank() -> None:
    line = f"[2026-12-01 08:00:00 TP6] Scheduler hit an exception: Traceback (most recent call last): ... {OOM}"
    (finding,) = parse_journal([line]).findings
    assert finding.kind == "cuda_oom_runtime" and finding.rank == 6 and finding.tried_bytes == 2 << 30


def test_chained_capture_failure_upgrades_the_inner_oom_to_graph_capture() -> None:
    lines = [
        "[2026-12-01 08:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 1, in init_memory_pool',
        OOM,
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "Exception: Capture cuda graph failed: " + OOM.split(": ", 1)[1][:120],
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)",
    ]
    (finding,) = parse_journal(lines).findings
    assert finding.kind == "cuda_oom_graph_capture" and finding.rank == 1
    assert finding.phase == "graph_capture" and finding.graph_flag == "--cuda-graph-max-bs-decode"
    assert finding.allocated_bytes == 77 << 30  # the inner, complete text's numbers


def test_oom_command_needs_a_kind_and_a_fraction_and_skips_what_oom_cannot_fix() -> None:
    assert oom_command("h", None, Recommendation()) is None
    assert oom_command("h", None, Recommendation(kind="cuda_oom_runtime")) is None
    assert (
        oom_command("h", None, Recommendation(kind="kv_pool_exhausted", mem_fraction_static=0.9, blocking=True)) is None
    )
    rec = Recommendation(kind="cuda_oom_runtime", mem_fraction_static=0.875, chunked_prefill_size=2048)
    assert oom_command("gpu 1", "my unit", rec) == (
        "remediate oom 'gpu 1' --unit 'my unit' --mem-fraction-static 0.875 --chunked-prefill-size 2048"
    )


def test_runtime_oom_far_beyond_the_gpu_stops_at_the_floor_and_says_so() -> None:
    huge = OOM.replace("Tried to allocate 2.00 GiB", "Tried to allocate 60.00 GiB")
    rec = advise(parse_journal([huge]), AdvisorInput(mem_fraction_static=0.9, alloc_conf="expandable_segments:True"))
    assert rec.mem_fraction_static == 0.5
    assert any("does not fit this GPU" in r for r in rec.reasons)


def test_runtime_oom_without_gpu_size_takes_one_step() -> None:
    cut = OOM.split(" GPU 0")[0] + " GPU 0 has a total capacity of 79.19 GiB of which 100.00 MiB is free."
    rec = advise(
        parse_journal([cut.replace(" total capacity of 79.19 GiB", " total capacity of ?")]), AdvisorInput(0.9)
    )
    assert rec.mem_fraction_static == 0.89


def test_startup_without_any_numbers_cannot_compute_a_fraction() -> None:
    rec = advise(parse_journal(["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]))
    assert rec.blocking and rec.mem_fraction_static is None
    stepped = advise(
        parse_journal(["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]),
        AdvisorInput(mem_fraction_static=0.8),
    )
    assert stepped.mem_fraction_static == 0.81  # one step up, never down


def test_startup_with_weights_filling_the_gpu_says_more_gpus() -> None:
    lines = [
        "[2026-12-01 08:00:00 TP0] Load weight begin. avail mem=80.00 GB",
        "[2026-12-01 08:00:09 TP0] Load weight end. type=X, dtype=fp16, avail mem=0.10 GB, mem usage=79.90 GB.",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ]
    rec = advise(parse_journal(lines), AdvisorInput(mem_fraction_static=0.99))
    assert rec.mem_fraction_static is None and any("more GPUs" in r for r in rec.reasons)


def test_crash_loop_from_a_growing_restart_counter() -> None:
    d = parse_journal([], {"NRestarts": "2"}, previous_restarts=1)
    (loop,) = d.findings
    assert loop.kind == "crash_loop" and loop.restarts == 2 and "grew from 1 to 2" in (loop.note or "")
    assert parse_journal([], {"NRestarts": "x"}).findings == ()


def test_gpu_listings_and_the_server_tree() -> None:
    assert parse_gpus(["0, 81559, 100", "1, [N/A], 3", "garbage"])[0].total_bytes == 81559 << 20
    assert len(parse_gpus(["1, [N/A], 3"])) == 0
    apps = parse_apps(["10, 500", "11, 600", "bad"])
    tree = process_tree(["1 0", "10 1", "11 99", "x y"], 1)
    assert tree == {1, 10}
    assert [a.pid for a in foreign_apps(apps, tree)] == [11]
    assert foreign_apps(apps, process_tree([], 0)) == ()


def test_sizes_at_the_edges() -> None:
    assert format_size(-2048) == "-2.00 KiB"
    assert format_size(5 << 30) == "5.00 GiB"
    assert gib_to_bytes("x") is None
    assert parse_size("1 TiB") == 1 << 40


def test_small_prefill_is_not_chunked_and_a_cut_old_format_keeps_what_it_has() -> None:
    lines = [
        "[2026-12-01 08:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 3000, #cached-token: 0, token usage: 0.1,",
        f"[2026-12-01 08:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last): ... {OOM}",
    ]
    rec = advise(parse_journal(lines), AdvisorInput(mem_fraction_static=0.9, chunked_prefill_size=-1))
    assert rec.chunked_prefill_size is None
    assert any("the prefill was 3000 tokens" in r for r in rec.reasons)
    old = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 3; 23.54 GiB tot"
    (finding,) = parse_journal([old]).findings
    assert (finding.torch_format, finding.gpu, finding.tried_bytes, finding.total_bytes) == ("old", 3, 20 << 20, None)


def test_sglang_suggesting_less_than_the_current_fraction_still_goes_up() -> None:
    line = (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.900. "
        "Raise --mem-fraction-static above 0.850 (minimum viable = 1 - available/pre = 0.8400)."
    )
    assert advise(parse_journal([line])).mem_fraction_static == 0.91


def test_torch_recoverable_retry_warnings_are_not_a_crash() -> None:
    warning = (
        "[W1201 08:00:00.123456 4711 c10/cuda/CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on "
        "device 1 while trying to allocate 2147483648 bytes (free: 1073741824, total: 150109106995)."
    )
    assert (
        parse_journal([warning, "[2026-12-01 08:00:01 TP1] Decode batch. #running-req: 3, #token: 10,"]).findings == ()
    )
