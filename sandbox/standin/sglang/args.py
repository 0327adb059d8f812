"""sglang 0.5.x command line: argparse with the real flag names, ``--config file.yaml`` merging.

Only the flags that matter to memory/scheduling/serving are modelled; every other flag is accepted and
ignored (``parse_known_args``).  A decent share of the real flag set is declared (even when ignored) so
that argparse's prefix matching (``allow_abbrev``) resolves or rejects abbreviations much as sglang does.
"""

from __future__ import annotations

import argparse
import os

# (flags, kwargs) in sglang's order; "dest" derives from the first flag.
_INT = {"type": int, "default": None}
_FLOAT = {"type": float, "default": None}
_STR = {"type": str, "default": None}
_BOOL = {"action": "store_true"}

ARGUMENTS: list[tuple[tuple[str, ...], dict]] = [
    (("--model-path", "--model"), {"type": str, "default": None}),
    (("--tokenizer-path",), _STR),
    (("--tokenizer-mode",), {"type": str, "default": "auto"}),
    (("--skip-tokenizer-init",), _BOOL),
    (("--load-format",), {"type": str, "default": "auto"}),
    (("--trust-remote-code",), _BOOL),
    (("--context-length",), _INT),
    (("--is-embedding",), _BOOL),
    (("--revision",), _STR),
    (("--model-impl",), {"type": str, "default": "auto"}),
    (("--host",), {"type": str, "default": "127.0.0.1"}),
    (("--port",), {"type": int, "default": 30000}),
    (("--skip-server-warmup",), _BOOL),
    (("--warmups",), _STR),
    (("--nccl-port",), _INT),
    (("--dtype",), {"type": str, "default": "auto"}),
    (("--quantization",), _STR),
    (("--kv-cache-dtype",), {"type": str, "default": "auto"}),
    (("--mem-fraction-static",), _FLOAT),
    (("--max-running-requests",), _INT),
    (("--max-queued-requests",), _INT),
    (("--max-total-tokens",), _INT),
    (("--chunked-prefill-size",), _INT),
    (("--max-prefill-tokens",), {"type": int, "default": 16384}),
    (("--schedule-policy",), {"type": str, "default": "fcfs"}),
    (("--schedule-conservativeness",), {"type": float, "default": 1.0}),
    (("--page-size",), {"type": int, "default": 1}),
    (("--cpu-offload-gb",), {"type": int, "default": 0}),
    (("--tensor-parallel-size", "--tp-size"), _INT),
    (("--pipeline-parallel-size", "--pp-size"), {"type": int, "default": 1}),
    (("--data-parallel-size", "--dp-size"), {"type": int, "default": 1}),
    (("--expert-parallel-size", "--ep-size", "--ep"), {"type": int, "default": 1}),
    (("--stream-interval",), {"type": int, "default": 1}),
    (("--stream-output",), _BOOL),
    (("--random-seed",), _INT),
    (("--watchdog-timeout",), {"type": float, "default": 300}),
    (("--device",), _STR),
    (("--base-gpu-id",), {"type": int, "default": 0}),
    (("--log-level",), {"type": str, "default": "info"}),
    (("--log-level-http",), _STR),
    (("--log-requests",), _BOOL),
    (("--log-requests-level",), {"type": int, "default": 2}),  # server_args.py: log_requests_level: int = 2
    (("--show-time-cost",), _BOOL),
    (("--enable-metrics",), _BOOL),
    (("--api-key",), _STR),
    (("--served-model-name",), _STR),
    (("--chat-template",), _STR),
    (("--reasoning-parser",), _STR),
    (("--tool-call-parser",), _STR),
    (("--dist-init-addr", "--nccl-init-addr"), _STR),
    (("--nnodes",), {"type": int, "default": 1}),
    (("--node-rank",), {"type": int, "default": 0}),
    (("--attention-backend",), _STR),
    (("--sampling-backend",), _STR),
    (("--speculative-algorithm",), _STR),
    (("--speculative-draft-model-path",), _STR),
    (("--speculative-num-steps",), _INT),
    (("--speculative-eagle-topk",), _INT),
    (("--speculative-num-draft-tokens",), _INT),
    (("--enable-dp-attention",), _BOOL),
    (("--disable-radix-cache",), _BOOL),
    (("--cuda-graph-max-bs",), _INT),
    (("--cuda-graph-bs",), {"type": int, "nargs": "+", "default": None}),
    (("--disable-cuda-graph",), _BOOL),
    (("--disable-cuda-graph-padding",), _BOOL),
    (("--enable-torch-compile",), _BOOL),
    (("--torch-compile-max-bs",), {"type": int, "default": 32}),
    (("--disable-overlap-schedule",), _BOOL),
    (("--enable-mixed-chunk",), _BOOL),
    (("--enable-cache-report",), _BOOL),
    (("--allow-auto-truncate",), _BOOL),
    (("--enable-memory-saver",), _BOOL),
    (("--config",), _STR),
]


def _dest(flags: tuple[str, ...]) -> str:
    dest = flags[0][2:].replace("-", "_")
    if dest == "tensor_parallel_size":
        dest = "tp_size"
    elif dest in ("pipeline_parallel_size", "data_parallel_size", "expert_parallel_size"):
        dest = dest.split("_")[0][0] + "p_size"
    return dest


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    for flags, kwargs in ARGUMENTS:
        parser.add_argument(*flags, dest=_dest(flags), **dict(kwargs))
    return parser


class ConfigError(ValueError):
    pass


def _yaml_scalar(raw: str) -> str | bool | None:
    value = raw.strip()
    if " #" in value:
        value = value.split(" #", 1)[0].rstrip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    low = value.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("null", "~", ""):
        return None
    return value


def config_to_argv(text: str, version: tuple[int, ...] = (0, 5, 6)) -> list[str]:
    """Flat ``key: value`` YAML → CLI tokens, as ``ConfigArgumentMerger._convert_config_to_args`` makes them
    (stdlib only: the flat subset, no PyYAML on a sandbox host).

    The key is written ``--{key}`` verbatim in every version (``mem_fraction_static`` stays an underscore
    flag argparse does not know). Booleans: 0.5.5 (srt/server_args_config_parser.py ``_add_boolean_arg``: its
    ``boolean_actions`` list is always empty, ``prepare_server_args`` reads ``action.action``, which argparse
    actions lack) writes ``--key`` for true and nothing for false; 0.5.23 (srt/utils/
    server_args_config_parser.py ``_add_boolean_arg``) does so for store_true flags only and writes
    ``--key true``/``--key false`` for the others.
    """
    store_true = {flags[0][2:] for flags, kwargs in _arguments(version) if kwargs.get("action") == "store_true"}
    argv: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == "---":
            continue
        key, sep, raw = stripped.partition(":")
        if not sep or not key.strip():
            raise ConfigError(f"line {lineno}: expected 'key: value', got {line!r}")
        key = key.strip()
        flag = "--" + key
        value = _yaml_scalar(raw)
        if isinstance(value, bool):
            if version < (0, 5, 23) or key in store_true:
                argv += [flag] if value else []
            else:
                argv += [flag, str(value).lower()]
        elif value is None:
            argv += [flag, "None"]  # _add_scalar_arg: str(None)
        else:
            argv.extend([flag, value])
    return argv


def merge_config(argv: list[str], version: tuple[int, ...] = (0, 5, 6)) -> list[str]:
    """``ConfigArgumentMerger.merge_config_with_args``: only the exact word ``--config`` names a file
    (``--config=FILE`` is left to argparse and never read); its args go before the CLI's (CLI > config >
    defaults). Errors as ``_extract_config_file_path`` and ``_validate_yaml_file`` word them."""
    if "--config" not in argv:
        return argv
    if argv.count("--config") > 1:
        raise ConfigError("Multiple config files specified! Only one allowed.")
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise ConfigError("No config file specified after --config flag!")
    path = argv[i + 1]
    suffix = os.path.splitext(path)[1]
    if suffix.lower() not in (".yaml", ".yml"):
        raise ConfigError(f"Config file must be YAML format, got: {suffix}")
    if not os.path.exists(path):
        raise ConfigError(f"Config file not found: {path}")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    rest = argv[:i] + argv[i + 2 :]
    return config_to_argv(text, version) + rest


# 0.5.23 splits the decode graph batch flag (arg_groups/fields/exec_.py ExecConfig: cuda_graph_max_bs_decode,
# cuda_graph_max_bs_prefill); the old --cuda-graph-max-bs is gone, so argparse's prefix matching finds it
# ambiguous and exits 2 ("ambiguous option: --cuda-graph-max-bs could match ...").
_SPLIT_GRAPH = [
    (("--cuda-graph-max-bs-decode",), _INT),
    (("--cuda-graph-max-bs-prefill",), _INT),
    (("--cuda-graph-bs-decode",), {"type": int, "nargs": "+", "default": None}),  # --cuda-graph-bs split too
    (("--cuda-graph-bs-prefill",), {"type": int, "nargs": "+", "default": None}),
]
# Flags of 0.5.5's server_args.py that 0.5.23 no longer has (no field in arg_groups/fields/, no registration in
# ServerArgs.add_cli_args): its parse_args rejects them ("unrecognized arguments"), exit 2. The stand-in ignores
# other unknown flags (it models a part of the table), these it refuses as 0.5.23 does.
REMOVED_IN_0523 = frozenset(
    {"--stream-output", "--enable-piecewise-cuda-graph", "--enable-nan-detection", "--enable-double-sparsity",
     "--torchao-config"}
)  # fmt: skip


def _arguments(version: tuple[int, ...]) -> list[tuple[tuple[str, ...], dict]]:
    """The flag table of ``version``: 0.5.23 has the split graph flags and --weight-cache-mode
    (arg_groups/fields/model.py), and the disaggregation flags the Mooncake check reads."""
    if version < (0, 5, 23):
        return ARGUMENTS
    table = [entry for entry in ARGUMENTS if entry[0] not in (("--cuda-graph-max-bs",), ("--cuda-graph-bs",))]
    table = [entry for entry in table if entry[0][0] not in REMOVED_IN_0523]
    return (
        table
        + _SPLIT_GRAPH
        + [
            (("--weight-cache-mode",), {"type": str, "default": "off", "choices": ["off", "daemon", "client"]}),
            (("--disaggregation-mode",), {"type": str, "default": "null", "choices": ["null", "prefill", "decode"]}),
            (("--disaggregation-transfer-backend",), {"type": str, "default": "mooncake"}),
        ]
    )


def parse_args(
    argv: list[str], prog: str | None = None, version: tuple[int, ...] = (0, 5, 6)
) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog=prog)
    for flags, kwargs in _arguments(version):
        parser.add_argument(*flags, dest=_dest(flags), **dict(kwargs))
    ns, rest = parser.parse_known_args(merge_config(list(argv), version))
    if version >= (0, 5, 23):  # the rest of the stand-in reads one decode graph batch size
        removed = [word for word in rest if word.partition("=")[0] in REMOVED_IN_0523]
        if removed:
            parser.error(f"unrecognized arguments: {' '.join(removed)}")
        ns.cuda_graph_max_bs = ns.cuda_graph_max_bs_decode
        ns.cuda_graph_bs = ns.cuda_graph_bs_decode
    for name, default in (("weight_cache_mode", "off"), ("disaggregation_mode", "null")):
        if not hasattr(ns, name):
            setattr(ns, name, default)
    return ns, rest


def expandable_env() -> str | None:
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
