"""PURE: sglang's server flags as its argparse knows them (server_args.py): the long options, the ones that
take no value, and a prefix resolved as argparse does (a unique prefix only); which of them a given release
accepts, deprecates or lacks (read in each release's wheel)."""

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


# Flags by release, read in the wheels (argparse: an exact option wins, else a unique prefix; exit 2 otherwise):
# * 0.5.14 server_args.py ``ServerArgs.add_cli_args``: ``--cuda-graph-max-bs-decode``/``-prefill`` and
#   ``--cuda-graph-backend-decode``/``-prefill`` appear; ``--cuda-graph-max-bs`` becomes a
#   ``DeprecatedAliasStoreAction`` of ``-decode``, ``--disable-cuda-graph`` a ``DeprecatedStoreTrueAction``
#   (new_flag ``--cuda-graph-backend-{decode,prefill}=disabled``). 0.5.13 has none of the split flags.
# * 0.5.20 arg_groups/fields/exec_.py ``ExecConfig``: no ``--cuda-graph-max-bs`` any more, so the word is an
#   ambiguous prefix of the two split flags (``error: ambiguous option``, exit 2). 0.5.19 still has the alias.
# * 0.5.22 server_args.py (``--attn-dp-size``, arg_groups/fields/parallel.py ``attn_dp_size``):
#   ``--enable-dp-attention`` becomes a ``DeprecatedStoreTrueAction`` (new_flag ``--attn-dp-size <dp-size>``;
#   arg_groups/parallel_hook.py ``handle_deprecated_dp_attention`` moves ``--dp-size`` to ``attn_dp_size``).
SPLIT_GRAPH_FROM = (0, 5, 14)
OLD_GRAPH_GONE_FROM = (0, 5, 20)
ATTN_DP_FROM = (0, 5, 22)
_SINCE: dict[str, tuple[int, ...]] = {
    "cuda-graph-max-bs-decode": SPLIT_GRAPH_FROM,
    "cuda-graph-max-bs-prefill": SPLIT_GRAPH_FROM,
    "cuda-graph-backend-decode": SPLIT_GRAPH_FROM,
    "cuda-graph-backend-prefill": SPLIT_GRAPH_FROM,
    "attn-dp-size": ATTN_DP_FROM,
}
_UNTIL: dict[str, tuple[int, ...]] = {"cuda-graph-max-bs": OLD_GRAPH_GONE_FROM}  # the first release without it
# A deprecated flag: from which release, and what its warning says to write instead.
DEPRECATED: dict[str, tuple[tuple[int, ...], str]] = {
    "cuda-graph-max-bs": (SPLIT_GRAPH_FROM, "--cuda-graph-max-bs-decode"),
    "disable-cuda-graph": (
        SPLIT_GRAPH_FROM,
        "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled",
    ),
    "enable-dp-attention": (ATTN_DP_FROM, "--attn-dp-size <dp-size> in place of --dp-size <dp-size>"),
}
# Flags only a known release resolves against (the table above, used when the release is unknown, stays as it was).
_LATER_FLAGS = frozenset({"attn-dp-size", "cuda-graph-backend-decode", "cuda-graph-backend-prefill"})
OLD_GRAPH_FLAG = "--cuda-graph-max-bs"
NEW_GRAPH_FLAG = "--cuda-graph-max-bs-decode"


def flags_of(release: tuple[int, ...] | None) -> frozenset[str]:
    """The long options of ``release`` (None: every spelling of every release, as before versions were read)."""
    if release is None:
        return SGLANG_FLAGS
    return frozenset(
        flag
        for flag in SGLANG_FLAGS | _LATER_FLAGS
        if release >= _SINCE.get(flag, ()) and (flag not in _UNTIL or release < _UNTIL[flag])
    )


def resolve_flag_at(name: str, release: tuple[int, ...] | None) -> str | None:
    """:func:`resolve_flag` as ``release``'s argparse resolves it (``cuda-graph-max-bs`` is ambiguous in 0.5.23)."""
    flags = flags_of(release)
    if name in flags:
        return name
    matches = [flag for flag in flags if flag.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def graph_batch_flag(release: tuple[int, ...] | None) -> str | None:
    """The decode graph batch flag ``release`` accepts without a warning (None: the release is not known)."""
    if release is None:
        return None
    return NEW_GRAPH_FLAG if release >= SPLIT_GRAPH_FROM else OLD_GRAPH_FLAG


def flag_problems(words: tuple[str, ...] | list[str], release: tuple[int, ...] | None, label: str) -> list[str]:
    """What ``release`` (spelled ``label``) says of the flags a command line writes: refused (argparse exits 2 at
    the next start) or deprecated (a warning, and the spelling to move to); nothing when the release is unknown.
    Only the flags this table knows are judged (an unknown flag may be one remediate does not model)."""
    if release is None:
        return []
    out: list[str] = []
    for word in words:
        if not word.startswith("--") or word == "--":
            continue
        name = word[2:].partition("=")[0]
        if not any(flag.startswith(name) for flag in SGLANG_FLAGS | _LATER_FLAGS):
            continue
        canonical = resolve_flag_at(name, release)
        if canonical is None:
            found = sorted(f"--{f}" for f in flags_of(release) if f.startswith(name))
            why = f"ambiguous there (could match {', '.join(found)})" if found else "unknown there"
            out.append(f"{word.partition('=')[0]}: {label} refuses it at startup ({why}; argparse exits 2)")
            continue
        deprecated = DEPRECATED.get(canonical)
        if deprecated is not None and release >= deprecated[0]:
            out.append(f"--{canonical} is deprecated in {label}: write {deprecated[1]}")
    return out
