"""The vLLM stand-in's process: argv, startup lines in vLLM's formats, the OpenAI endpoints, the runtime OOM.

Knobs (JSON): ``$VLLM_STANDIN_CONFIG``, else ``$SGLANG_STANDIN_CONFIG``, else ``/etc/vllm-standin.json``, else
``/etc/sglang-standin.json`` (the sandbox host's knobs file). Stdlib only.
"""

from __future__ import annotations

import json
import os
import time

from vllm import memory
from vllm.knobs import load_knobs, version_tuple
from vllm.logs import LOG

VERSION = "0.11.0"
VALUE = {
    "--model",
    "--config",
    "--host",
    "--port",
    "--gpu-memory-utilization",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--max-num-seqs",
    "--kv-cache-memory-bytes",
    "--num-gpu-blocks-override",
    "--cpu-offload-gb",
    "--block-size",
    "--served-model-name",
    "-tp",
    "--tensor-parallel-size",
}
BOOL = {
    "--enable-chunked-prefill",
    "--no-enable-chunked-prefill",
    "--enforce-eager",
    "--trust-remote-code",
    "--enable-log-requests",
    "--disable-log-requests",
}


def logs_requests(opts: dict[str, object], version: str) -> bool:
    """Whether the API server logs each request's prompt (``Received request …``). vLLM 0.8.5
    (entrypoints/openai/api_server.py init_app_state): a RequestLogger unless ``--disable-log-requests``.
    vLLM 0.11.0 (same function; engine/arg_utils.py AsyncEngineArgs.add_cli_args): only with
    ``--enable-log-requests``; ``--disable-log-requests`` is its deprecated opposite (the property's setter
    sets ``enable_log_requests = not value``). The switch came between the two; the stand-in puts it at the
    0.11.0 it read."""
    if version_tuple(version) < (0, 11):
        return not opts.get("--disable-log-requests")
    return bool(opts.get("--enable-log-requests")) and not opts.get("--disable-log-requests")


def log_version(version: str, model: str) -> None:
    """The startup line naming the version, as the version logs it under systemd."""
    if version_tuple(version) < (0, 15):
        # 0.8.5/0.11.0 entrypoints/openai/api_server.py run_server: logger.info("vLLM API server version %s", …)
        where = "api_server.py:1839" if version_tuple(version) >= (0, 11) else "api_server.py:1043"
        LOG("INFO", where, f"vLLM API server version {version}")
    elif os.environ.get("VLLM_DISABLE_LOG_LOGO", "0") not in ("", "0"):
        # 0.15.1 … 0.34.0 log_version_and_model (0.34.0 entrypoints/common/startup.py): the plain form
        LOG("INFO", "startup.py:43", f"vLLM server version {version}, serving model {model}")
    else:
        # ... else the logo, monochrome (vLLM's NewLineFormatter, no tty: no colours), each line under the prefix
        for line in ("", "       █     █     █▄   ▄█", f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
                     f"  █▄█▀ █     █     █     █  model   {model}", "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", ""):  # fmt: skip
            LOG("INFO", "startup.py:43", line)


def default_utilization(version: str) -> float:
    """The utilization a unit that sets none runs at, by release (``CacheConfig.gpu_memory_utilization``):
    0.9 up to 0.19 (0.8.5 vllm/config.py, 0.11.0 vllm/config/cache.py), ``Field(default=0.92)`` from 0.20.0,
    and from 0.34.0 ``None`` resolved by ``CacheConfig.resolved_gpu_memory_utilization`` to
    ``DEFAULT_GPU_MEMORY_UTILIZATION = 0.92`` (the stand-in has no extensible KV cache, whose 1.0 it would be)."""
    return 0.92 if version_tuple(version) >= (0, 20) else 0.9


def version_of(knobs: dict[str, object]) -> str:
    """The vLLM version the stand-in claims: the ``vllm_version`` knob (``$VLLM_STANDIN_VERSION`` wins), 0.11.0."""
    return str(knobs.get("vllm_version") or VERSION)


def parse_args(argv: list[str], serve: bool, version: str = VERSION) -> dict[str, object]:
    """FlexibleArgumentParser's rules that matter here: ``_`` = ``-``, ``=`` forms, --config YAML under the CLI.

    By version (``FlexibleArgumentParser.parse_args``): ``vllm serve --model M`` is a ValueError in 0.8.5
    (vllm/utils.py) and 0.11 (vllm/utils/__init__.py); 0.34 (vllm/utils/argparse_utils.py) warns and moves the
    model to the front. The YAML is read only for the exact word ``--config`` (``"--config" in args``, before
    the ``=`` forms are split: ``--config=FILE`` is never read)."""
    ver = version_tuple(version)
    words: list[str] = []
    for word in argv:
        if word.startswith("--") and not word.startswith("--config="):
            key, eq, value = word.partition("=")
            words += [key.replace("_", "-"), value] if eq else [key.replace("_", "-")]
        else:
            words.append(word)
    if serve and "--model" in words and ver < (0, 34):
        raise SystemExit(
            "ValueError: With `vllm serve`, you should provide the model as a positional argument or "
            "in a config file instead of via the `--model` option."
        )
    if serve and "--model" in words:
        LOG(
            "WARNING",
            "argparse_utils.py:330",
            "With `vllm serve`, you should provide the model as a positional argument or in a config file instead "
            "of via the `--model` option. The `--model` option will be removed in a future version.",
        )
    opts: dict[str, object] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word in BOOL:
            opts[word] = True
            i += 1
        elif word in VALUE and i + 1 < len(words):
            opts[word] = words[i + 1]
            i += 2
        elif not word.startswith("-") and serve and "model" not in opts:
            opts["model"] = word
            i += 1
        else:
            i += 2 if word.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("-") else 1
    if "--config" in argv:  # flat `key: value` YAML (load_config_file), under the command line: the CLI wins
        with open(str(opts["--config"]), encoding="utf-8") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                flag = "--" + key.strip().replace("_", "-")
                value = value.strip().strip("'\"")
                if not sep or line.startswith("#") or flag in opts or f"--no-{flag[2:]}" in opts:
                    continue
                if value in ("true", "false") and flag in BOOL:
                    # true: the bare flag; false: nothing before 0.34, `--no-KEY` where it exists from 0.34 on
                    no_flag = f"--no-{flag[2:]}"
                    if value == "true":
                        opts[flag] = True
                    elif ver >= (0, 34) and no_flag in BOOL:
                        opts[no_flag] = True
                    continue
                opts[flag] = value
    opts.setdefault("model", opts.get("--model", "standin/mha-13b-40k"))
    return opts


def _board(knobs: dict[str, object], used_gib: float) -> str:
    directory = str(knobs.get("gpu_state_dir") or "/run/sglang-standin")
    path = os.path.join(directory, f"{os.getpid()}.json")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump({"pid": os.getpid(), "name": "vllm", "used_bytes": [int(used_gib * memory.GIB)]}, fh)
        os.replace(path + ".tmp", path)
    except OSError:
        pass
    return path


def _neighbour_gib(knobs: dict[str, object]) -> float:
    raw = knobs.get("neighbour")
    items = raw if isinstance(raw, list) else [raw] if raw else []
    return sum(float(n.get("gib", 0.0)) for n in items if isinstance(n, dict) and 0 in n.get("gpus", [0]))


def _profile(knobs: dict[str, object]) -> memory.Profile:
    """The model profile, its weights resized by the ``weights_gib`` knob (a bigger model on the same card)."""
    weights = knobs.get("weights_gib")
    return memory.Profile(weights_gib=float(str(weights))) if weights is not None else memory.Profile()


def _startup_failure(message: str) -> int:
    LOG("ERROR", "core.py:708", "EngineCore failed to start.", engine=True)
    LOG.traceback(message)
    LOG.traceback(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore_DP0': 1}",
        engine=False,
    )
    return 1


def main(argv: list[str], serve: bool) -> int:
    knobs = load_knobs()
    version = version_of(knobs)
    opts = parse_args(argv, serve, version)
    p = _profile(knobs)
    util = float(str(opts.get("--gpu-memory-utilization", default_utilization(version))))
    batched = int(
        str(opts.get("--max-num-batched-tokens", memory.default_batched_tokens(p.total_gib, str(knobs["gpu_name"]))))
    )
    mml = int(str(opts.get("--max-model-len", p.max_model_len)))
    seqs = int(str(opts.get("--max-num-seqs", memory.default_max_num_seqs(p.total_gib, str(knobs["gpu_name"])))))
    block = int(str(opts.get("--block-size", "16")))
    expandable = "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get(
        "PYTORCH_ALLOC_CONF", ""
    )
    scale = float(str(knobs["time_scale"]))
    log_version(version, str(opts["model"]))
    LOG(
        "INFO",
        "core.py:77",
        f"Initializing a V1 LLM engine (v{version}) with config: model='{opts['model']}', "
        f"max_seq_len={mml}, enforce_eager={bool(opts.get('--enforce-eager'))}",
        engine=True,
    )
    free = p.total_gib - p.context_gib - _neighbour_gib(knobs)
    requested = p.total_gib * util
    if free < requested:
        return _startup_failure(
            f"ValueError: Free memory on device ({round(free, 2)}/{round(p.total_gib, 2)} GiB) on startup is less "
            f"than desired GPU memory utilization ({util}, {round(requested, 2)} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes."
        )
    time.sleep(float(str(knobs["load_s"])) * scale * 0.7)
    LOG("INFO", "gpu_model_runner.py:2653", f"Model loading took {p.weights_gib:.4f} GiB and 9.10 seconds", engine=True)
    if memory.sampler_need_gib(p, seqs) > memory.profile_room_gib(p, free, batched):
        # GPUModelRunner.profile_run ends with _dummy_sampler_run: torch's OOM there is re-raised with this text.
        return _startup_failure(
            f"RuntimeError: CUDA out of memory occurred when warming up sampler with {seqs} dummy requests. Please "
            "try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
        )
    sizing = memory.size(p, util, batched, block)
    if "--kv-cache-memory-bytes" in opts:
        fixed = int(str(opts["--kv-cache-memory-bytes"])) / memory.GIB
        blocks = int(fixed * memory.GIB) // (block * p.kv_bytes_per_token)
        sizing = memory.Sizing(sizing.requested_gib, sizing.peak_gib, fixed, blocks, blocks * block)
    LOG("INFO", "gpu_worker.py:298", f"Available KV cache memory: {sizing.available_gib:.2f} GiB", engine=True)
    if sizing.available_gib <= 0:
        return _startup_failure(
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    needed = memory.needed_gib(p, mml, block)
    if needed > sizing.available_gib:
        estimate = f"Based on the available memory, the estimated maximum model length is {sizing.tokens}."
        return _startup_failure(
            f"ValueError: To serve at least one request with the models's max seq len ({mml}), ({needed:.2f} GiB KV "
            f"cache is needed, which is larger than the available KV cache memory ({sizing.available_gib:.2f} GiB). "
            f"{estimate} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
            "the engine."
        )
    if knobs.get("capacity_line", True):
        LOG("INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {sizing.tokens:,} tokens", engine=True)
    LOG(
        "INFO",
        "kv_cache_utils.py:1091",
        f"Maximum concurrency for {mml:,} tokens per request: {sizing.tokens / mml:.2f}x",
        engine=True,
    )
    time.sleep(float(str(knobs["load_s"])) * scale * 0.3)
    LOG(
        "INFO",
        "core.py:210",
        f"init engine (profile, create kv cache, warmup model) took {float(str(knobs['load_s'])):.2f} seconds",
        engine=True,
    )
    board = _board(knobs, sizing.requested_gib)
    from vllm.httpd import serve_http

    state = {
        "opts": opts,
        "profile": p,
        "sizing": sizing,
        "batched": batched,
        "mml": mml,
        "block": block,
        "util": util,
        "expandable": expandable,
        "knobs": knobs,
        "dead": False,
        "running": 0,
        "used_blocks": 0,
        "version": version,
        "log_requests": logs_requests(opts, version),
        "requests": 0,
    }
    try:
        return serve_http(state, str(opts.get("--host", "0.0.0.0")), int(str(opts.get("--port", "8000"))))
    finally:
        try:
            os.unlink(board)
        except OSError:
            pass
