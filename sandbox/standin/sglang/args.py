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


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    for flags, kwargs in ARGUMENTS:
        dest = flags[0][2:].replace("-", "_")
        if dest == "tensor_parallel_size":
            dest = "tp_size"
        elif dest in ("pipeline_parallel_size", "data_parallel_size", "expert_parallel_size"):
            dest = dest.split("_")[0][0] + "p_size"
        elif dest == "dist_init_addr":
            dest = "dist_init_addr"
        parser.add_argument(*flags, dest=dest, **dict(kwargs))
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


def config_to_argv(text: str) -> list[str]:
    """Flat ``key: value`` YAML (the subset sglang's ConfigArgumentMerger accepts) → CLI tokens."""
    argv: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == "---":
            continue
        key, sep, raw = stripped.partition(":")
        if not sep or not key.strip():
            raise ConfigError(f"line {lineno}: expected 'key: value', got {line!r}")
        flag = "--" + key.strip().replace("_", "-")
        value = _yaml_scalar(raw)
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        else:
            argv.extend([flag, value])
    return argv


def merge_config(argv: list[str]) -> list[str]:
    """Insert the config's args before the CLI ones (CLI > config > defaults), as sglang 0.5.3+ does."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise ConfigError("--config needs a file")
    path = argv[i + 1]
    if not path.endswith((".yaml", ".yml")):
        raise ConfigError(f"Config file must be YAML format (.yaml or .yml): {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"Config file not found: {path}") from exc
    rest = argv[:i] + argv[i + 2 :]
    return config_to_argv(text) + rest


def parse_args(argv: list[str], prog: str | None = None) -> tuple[argparse.Namespace, list[str]]:
    return build_parser(prog).parse_known_args(merge_config(list(argv)))


def expandable_env() -> str | None:
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
