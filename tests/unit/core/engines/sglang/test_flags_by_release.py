"""core/engines/sglang/flags.py by release: what each wheel's argparse accepts, deprecates or lacks."""

from __future__ import annotations

from remediate.core.engines.sglang.flags import (
    SGLANG_FLAGS,
    flag_problems,
    flags_of,
    graph_batch_flag,
    resolve_flag,
    resolve_flag_at,
)


def test_cuda_graph_max_bs_by_release() -> None:
    # 0.5.13: the one flag; 0.5.14-0.5.19: a DeprecatedAliasStoreAction of -decode; 0.5.20: gone, an ambiguous prefix
    assert resolve_flag_at("cuda-graph-max-bs", (0, 5, 5)) == "cuda-graph-max-bs"
    assert resolve_flag_at("cuda-graph-max-bs-decode", (0, 5, 13)) is None
    assert resolve_flag_at("cuda-graph-max-bs", (0, 5, 19)) == "cuda-graph-max-bs"
    assert resolve_flag_at("cuda-graph-max-bs", (0, 5, 23)) is None
    assert resolve_flag_at("cuda-graph-max-bs-d", (0, 5, 23)) == "cuda-graph-max-bs-decode"
    assert graph_batch_flag((0, 5, 5)) == "--cuda-graph-max-bs"
    assert graph_batch_flag((0, 5, 14)) == "--cuda-graph-max-bs-decode"
    assert graph_batch_flag(None) is None


def test_unknown_release_resolves_as_before() -> None:
    assert flags_of(None) == SGLANG_FLAGS
    for name in ("mem-frac", "cuda-graph-max-bs", "tp", "dp", "max-prefill"):
        assert resolve_flag_at(name, None) == resolve_flag(name)


def test_problems_on_0523() -> None:
    words = ["--model-path", "/m", "--cuda-graph-max-bs", "160", "--disable-cuda-graph", "--enable-dp-attention"]
    problems = flag_problems(words, (0, 5, 23), "sglang 0.5.23")
    assert problems[0] == (
        "--cuda-graph-max-bs: sglang 0.5.23 refuses it at startup (ambiguous there (could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill); argparse exits 2)"
    )
    assert problems[1].startswith(
        "--disable-cuda-graph is deprecated in sglang 0.5.23: write --cuda-graph-backend-decode"
    )
    assert problems[2].startswith("--enable-dp-attention is deprecated in sglang 0.5.23: write --attn-dp-size")
    assert len(problems) == 3


def test_problems_by_release() -> None:
    words = ["--cuda-graph-max-bs=160", "--enable-dp-attention", "--unknown-to-remediate", "x"]
    assert flag_problems(words, (0, 5, 5), "sglang 0.5.5") == []
    assert flag_problems(words, (0, 5, 15), "sglang 0.5.15") == [
        "--cuda-graph-max-bs is deprecated in sglang 0.5.15: write --cuda-graph-max-bs-decode"
    ]
    assert flag_problems(["--cuda-graph-max-bs-decode", "8"], (0, 5, 5), "sglang 0.5.5") == [
        "--cuda-graph-max-bs-decode: sglang 0.5.5 refuses it at startup (unknown there; argparse exits 2)"
    ]
    assert flag_problems(words, None, "sglang ?") == []  # the release is not known: nothing said
