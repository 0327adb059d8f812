"""Unit tests of the stand-in's pure memory and timing models."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandbox" / "standin"))

from sglang import memory, oomtext, runtime, timing  # noqa: E402
from sglang.args import config_to_argv, parse_args  # noqa: E402

P = memory.KIMI_K26_TP8
OOM_RE = re.compile(
    r"CUDA out of memory\. Tried to allocate ([\d.]+ (?:bytes|KiB|MiB|GiB))\. GPU (\d+) has a total capacity of "
    r"([\d.]+ \w+) of which ([\d.]+ \w+|0 bytes) is free\. .*and ([\d.]+ \w+) is reserved by PyTorch but "
    r"unallocated\. If reserved.*fragmentation\.  See documentation for Memory Management  \(https://"
)


def test_cell_size_is_mla() -> None:
    assert memory.kv_cell_bytes(P) == (512 + 64) * 61 * 2 == 70272
    assert memory.kv_cell_bytes(P, "fp8_e4m3") == 35136


def test_incident_fix_reports_exactly_195011() -> None:
    assert memory.plan_memory(P, 0.93).max_total_num_tokens == 195011


def test_each_hundredth_moves_about_14k() -> None:
    t = {m: memory.plan_memory(P, m).max_total_num_tokens for m in (0.90, 0.91, 0.92, 0.93, 0.94, 0.95)}
    assert 208_000 < t[0.94] < 210_000
    for a, b in zip(sorted(t), sorted(t)[1:], strict=False):
        assert 13_800 < t[b] - t[a] < 14_200


def test_caps_and_pages() -> None:
    assert memory.plan_memory(P, 0.93, max_total_tokens=100_000).max_total_num_tokens == 100_000
    assert memory.plan_memory(P, 0.93, max_total_tokens=10**9).max_total_num_tokens == 195011
    assert memory.plan_memory(P, 0.93, page_size=64).max_total_num_tokens == 195011 // 64 * 64
    plan = memory.plan_memory(P, 0.93)
    assert plan.max_req_input_len == min(262144 - 1, 195011 - 1) - 5
    assert plan.max_running_requests == 2048
    assert memory.plan_memory(P, 0.93, context_length=32768).max_req_input_len == 32768 - 1 - 5


def test_too_small_fraction_fails_at_startup() -> None:
    with pytest.raises(memory.NotEnoughMemoryError) as exc:
        memory.plan_memory(P, 0.78)
    assert str(exc.value) == (
        "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.78"
    )


def test_too_large_fraction_fails_graph_capture() -> None:
    with pytest.raises(memory.GraphCaptureOOMError):
        memory.plan_memory(P, 0.97)


def test_format_size_matches_torch() -> None:
    assert oomtext.format_size(0) == "0 bytes"
    assert oomtext.format_size(1024) == "1024 bytes"
    assert oomtext.format_size(2048) == "2.00 KiB"
    assert oomtext.format_size(896 * memory.MIB) == "896.00 MiB"
    assert oomtext.format_size(memory.GIB) == "1024.00 MiB"
    assert oomtext.format_size(int(94.97 * memory.GIB)) == "94.97 GiB"


def _run(mfs: float, chunk: int, expandable: bool, prompts: list[int]) -> list[bool]:
    """Serve prompts in order; True where the prefill fits. Stops accumulating after a crash."""
    plan = memory.plan_memory(P, mfs)
    frag, ok = 0.0, []
    for n in prompts:
        spike = runtime.prefill_spike_bytes(P, n, chunk)
        oom = runtime.check_prefill(plan, P, spike, frag)
        ok.append(oom is None)
        if oom is not None:
            break
        frag = runtime.fragmentation_after(P, frag, n + 128, expandable)
    return ok


def test_incident_crashes_on_32k_after_some_load() -> None:
    assert _run(0.94, -1, False, [32768]) == [True]  # a fresh server survives one
    assert _run(0.94, -1, False, [2000, 2000, 32768]) == [True, True, False]
    plan = memory.plan_memory(P, 0.94)
    oom = runtime.check_prefill(plan, P, runtime.prefill_spike_bytes(P, 32768, -1), 1.4)
    assert oom is not None
    msg = oomtext.torch_oom_message(oom)
    m = OOM_RE.search(msg)
    assert m and m.group(1) == "896.00 MiB" and m.group(3) == "94.97 GiB"
    assert "Including non-PyTorch memory, this process has " in msg
    assert (
        "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"
        in msg
    )


def test_fix_survives_32k_and_185k() -> None:
    load = [2000] * 10
    assert all(_run(0.93, 4096, True, load + [32768, 185_000, 32768]))
    plan = memory.plan_memory(P, 0.93)
    assert 185_000 < plan.max_req_input_len


@pytest.mark.parametrize(
    ("mfs", "chunk", "expandable", "prompt", "survives"),
    [
        (0.94, 4096, True, 185_000, True),  # 0.94 is fine once chunked + expandable
        (0.94, 4096, False, 32768, False),  # chunking alone: fragmentation eats 0.94's 1.0 GiB headroom
        (0.94, -1, True, 32768, True),  # expandable alone saves a 32k prompt at 0.94 ...
        (0.94, -1, True, 40000, False),  # ... but not a 40k one
        (0.93, 4096, False, 185_000, True),  # 0.93 + chunking survives even full fragmentation
        (0.93, -1, False, 32768, False),  # 0.93 alone does not
    ],
)
def test_decision_table(mfs: float, chunk: int, expandable: bool, prompt: int, survives: bool) -> None:
    assert _run(mfs, chunk, expandable, [2000] * 6 + [prompt])[-1] is survives


def test_expandable_segments_parsing() -> None:
    assert runtime.has_expandable_segments("expandable_segments:True")
    assert runtime.has_expandable_segments("max_split_size_mb:128, expandable_segments:True")
    assert not runtime.has_expandable_segments("expandable_segments:False")
    assert not runtime.has_expandable_segments(None)


def test_default_mem_fraction_like_sglang_053() -> None:
    assert memory.default_mem_fraction_static(P, 8192, 16384, 512, 8) == round((97249.28 - 14848) / 97249.28, 3)


def test_timing_passes_through_the_incident_table() -> None:
    assert timing.decode_rate(1400) == pytest.approx(118.6, rel=1e-6)
    assert timing.decode_rate(11000) == pytest.approx(19.9, rel=1e-6)
    assert timing.decode_rate(32000) == pytest.approx(6.3, rel=1e-6)
    assert timing.prefill_rate(1000) == pytest.approx(9000)
    assert timing.prefill_rate(185_000) == pytest.approx(2500)
    rates = [timing.decode_rate(x) for x in range(0, 200_000, 1000)]
    assert all(a > b for a, b in zip(rates, rates[1:], strict=False))


def test_argparse_forms() -> None:
    ns, unknown = parse_args(
        [
            "--model",
            "m",
            "--mem-frac",
            "0.9",
            "--mem-fraction-static=0.94",
            "--tp",
            "8",
            "--max-prefill",
            "4096",
            "--foo",
            "bar",
            "--chunked-prefill-size=-1",
            "--dp",
            "2",
        ]
    )
    assert (ns.model_path, ns.mem_fraction_static, ns.tp_size, ns.max_prefill_tokens) == ("m", 0.94, 8, 4096)
    assert (ns.chunked_prefill_size, ns.dp_size, unknown) == (-1, 2, ["--foo", "bar"])
    with pytest.raises(SystemExit):
        parse_args(["--model-path", "m", "--max", "3"])  # ambiguous prefix, as in argparse


def test_config_file_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("# comment\nmem-fraction-static: 0.91\nchunked-prefill-size: 2048\ntrust-remote-code: true\n")
    ns, _ = parse_args(["--model-path", "m", "--config", str(cfg), "--mem-fraction-static", "0.93"])
    assert (ns.mem_fraction_static, ns.chunked_prefill_size, ns.trust_remote_code) == (0.93, 2048, True)
    ns, _ = parse_args(["--model-path", "m", "--config", str(cfg)], version=(0, 5, 23))
    assert ns.mem_fraction_static == 0.91  # the YAML's, where the command line sets none


def test_config_keys_are_flags_verbatim_and_booleans_by_version() -> None:
    # _convert_config_to_args writes --{key} as the key is spelled: an underscore key is no sglang flag.
    assert config_to_argv("a_b: 'x y'\nflag: false\n") == ["--a_b", "x y"]
    # 0.5.23: a non-store_true boolean is "--key false"; a store_true one is left out when false.
    yaml_text = "enable-metrics: false\nflag: false\nlog-requests: true\n"
    assert config_to_argv(yaml_text, (0, 5, 23)) == ["--flag", "false", "--log-requests"]
    assert config_to_argv(yaml_text, (0, 5, 5)) == ["--log-requests"]


def test_config_errors_are_worded_as_the_merger_words_them(tmp_path: Path) -> None:
    from sglang.args import ConfigError

    with pytest.raises(ConfigError, match="^Config file must be YAML format, got: .json$"):
        parse_args(["--config", str(tmp_path / "c.json")])
    with pytest.raises(ConfigError, match="^Config file not found: "):
        parse_args(["--config", str(tmp_path / "gone.yaml")])
    with pytest.raises(ConfigError, match="^Multiple config files specified! Only one allowed.$"):
        parse_args(["--config", "a.yaml", "--config", "b.yaml"])
    ns, _ = parse_args(["--model-path", "m", f"--config={tmp_path / 'gone.yaml'}"])  # not the exact word: unread
    assert ns.mem_fraction_static is None


def test_0523_splits_the_graph_flag_so_the_old_one_is_ambiguous(capsys: pytest.CaptureFixture[str]) -> None:
    ns, _ = parse_args(["--model-path", "m", "--cuda-graph-max-bs-decode", "64"], version=(0, 5, 23))
    assert ns.cuda_graph_max_bs == 64
    assert parse_args(["--model-path", "m", "--cuda-graph-max-bs", "64"])[0].cuda_graph_max_bs == 64  # 0.5.6
    with pytest.raises(SystemExit) as info:
        parse_args(["--model-path", "m", "--cuda-graph-max-bs", "64"], version=(0, 5, 23))
    assert info.value.code == 2
    parse_args(["--model-path", "m", "--stream-output"])  # 0.5.6: a flag it has
    with pytest.raises(SystemExit) as removed:
        parse_args(["--model-path", "m", "--stream-output"], version=(0, 5, 23))
    assert removed.value.code == 2
    err = capsys.readouterr().err
    assert (
        "error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill" in err
    )
    assert "error: unrecognized arguments: --stream-output" in err


def test_env_overrides_the_knobs_file(tmp_path: Path) -> None:
    from sglang import knobs

    cfg = tmp_path / "k.json"
    cfg.write_text('{"time_scale": 0.01, "api_version": "0.5.3"}')
    env = {"SGLANG_STANDIN_CONFIG": str(cfg), "SGLANG_STANDIN_VERSION": "0.5.23", "SGLANG_STANDIN_TIME_SCALE": "0.0005"}
    kn = knobs.load_knobs(env)
    assert (kn["api_version"], kn["time_scale"], kn["kv_admission"]) == ("0.5.23", 0.0005, "queue")
    assert knobs.load_knobs({"SGLANG_STANDIN_CONFIG": str(cfg)})["time_scale"] == 0.01
    cfg.write_text('{"kv_admission": "sometimes"}')
    with pytest.raises(ValueError, match="kv_admission"):
        knobs.load_knobs({"SGLANG_STANDIN_CONFIG": str(cfg)})


def test_oom_text_lists_processes_in_pid_order_and_the_private_pools() -> None:
    oom = oomtext.OOM(
        alloc_bytes=896 * memory.MIB,
        total_bytes=int(94.97 * memory.GIB),
        free_bytes=300 * memory.MIB,
        process_bytes=88 * memory.GIB,
        allocated_bytes=86 * memory.GIB,
        reserved_unallocated_bytes=700 * memory.MIB,
        private_pool_bytes=int(1.12 * memory.GIB),
        others=((4242, 6 * memory.GIB),),
        pid=9000,
    )
    msg = oomtext.torch_oom_message(oom, 3)
    assert (
        "GPU 3 has a total capacity of 94.97 GiB of which 300.00 MiB is free. Process 4242 has 6.00 GiB memory in use. "
        "Including non-PyTorch memory, this process has 88.00 GiB memory in use. Of the allocated memory 86.00 GiB is "
        "allocated by PyTorch, with 1.12 GiB allocated in private pools (e.g., CUDA Graphs), and 700.00 MiB is reserved"
    ) in msg


def test_version_wordings_and_the_minimum_fraction() -> None:
    assert memory.minimum_viable_fraction(P) == pytest.approx(0.79067, abs=1e-5)
    with pytest.raises(memory.NoKVMemoryError, match=r"above 0\.791 \(minimum viable = 1 - available/pre = 0\.7907\)"):
        memory.plan_memory(P, 0.79, version=(0, 5, 23))
    with pytest.raises(memory.NotEnoughMemoryError, match=r"self\.server_args\.mem_fraction_static=0\.79$"):
        memory.plan_memory(P, 0.79, version=(0, 5, 3))
    assert memory.plan_memory(P, 0.80, version=(0, 5, 23)).max_total_num_tokens == 13059


@pytest.mark.parametrize("mfs", [0.8, 0.85, 0.9, 0.93, 0.94, 0.95])
def test_pool_is_the_documented_formula(mfs: float) -> None:
    free0, free1 = 91.60, 91.60 - 72.425297
    expected = int((free1 - free0 * (1 - mfs)) * (1 << 30) // 70272)
    plan = memory.plan_memory(P, mfs)
    assert plan.max_total_num_tokens == expected and plan.headroom == pytest.approx(free0 * (1 - mfs))
    assert min(plan.rank_available(r) for r in range(8)) == plan.available == plan.rank_available(0)
