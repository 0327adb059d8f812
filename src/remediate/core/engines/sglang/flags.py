"""PURE: sglang's server flags as its argparse knows them (server_args.py): the long options, the ones that
take no value, and a prefix resolved as argparse does (a unique prefix only)."""

from __future__ import annotations

# sglang server flags (argparse long options, without "--"). Prefixes are resolved against this
# table, so it lists neighbours of the flags we edit too: a prefix counts only when it is unique.
SGLANG_FLAGS: frozenset[str] = frozenset(
    """
    model-path model tokenizer-path tokenizer-mode skip-tokenizer-init load-format trust-remote-code
    dtype kv-cache-dtype quantization context-length device served-model-name chat-template
    is-embedding revision host port mem-fraction-static max-running-requests max-total-tokens
    chunked-prefill-size max-prefill-tokens schedule-policy schedule-conservativeness
    cpu-offload-gb page-size tp-size tensor-parallel-size pp-size pipeline-parallel-size
    dp-size data-parallel-size ep-size expert-parallel-size ep
    stream-interval random-seed log-level log-requests enable-metrics api-key
    config attention-backend sampling-backend grammar-backend disable-cuda-graph
    disable-cuda-graph-padding disable-radix-cache cuda-graph-max-bs cuda-graph-max-bs-decode
    cuda-graph-max-bs-prefill cuda-graph-bs enable-dp-attention enable-torch-compile
    torch-compile-max-bs enable-mixed-chunk enable-p2p-check triton-attention-reduce-in-fp32
    speculative-algorithm speculative-draft-model-path speculative-num-steps
    reasoning-parser tool-call-parser watchdog-timeout nnodes node-rank dist-init-addr
    max-micro-batch-size enable-ep-moe moe-a2a-backend dist-timeout base-gpu-id gpu-id-step
    weight-cache-mode
    """.split()
)
# Flags that take no value (argparse store_true); every other flag consumes the next argument.
SGLANG_BOOL_FLAGS: frozenset[str] = frozenset(
    """
    trust-remote-code skip-tokenizer-init is-embedding log-requests enable-metrics disable-cuda-graph
    disable-cuda-graph-padding disable-radix-cache enable-dp-attention enable-torch-compile
    enable-mixed-chunk enable-p2p-check triton-attention-reduce-in-fp32 enable-ep-moe
    """.split()
)


def resolve_flag(name: str) -> str | None:
    """Canonical flag for ``name`` (without ``--``): exact, else a prefix of exactly one flag."""
    if name in SGLANG_FLAGS:
        return name
    matches = [flag for flag in SGLANG_FLAGS if flag.startswith(name)]
    return matches[0] if len(matches) == 1 else None
