"""Test/sandbox knobs: JSON from $SGLANG_STANDIN_CONFIG, else /etc/sglang-standin.json (see README)."""

from __future__ import annotations

import json
import os

DEFAULT_PATH = "/etc/sglang-standin.json"
FAILURES = ("none", "never_healthy", "crash_during_load", "exit_at_once", "slow_load")

DEFAULTS: dict[str, object] = {
    "time_scale": 0.004,  # wall seconds per simulated second
    "failure": "none",
    "failure_match": None,  # apply `failure` only when the command line contains this substring
    "api_version": "0.5.6",
    "profile": "kimi-k2.6-tp8",
    "load_s": 450.0,  # simulated startup (torch dist + weights + KV + graphs), the incident's ~7.5 min
    "warmup_s": 40.0,  # simulated warm-up after the port opens (/health 503 meanwhile)
    "prefill_scale": 1.0,  # multiplies simulated prefill time
    "decode_scale": 1.0,  # multiplies simulated decode time
    "default_chunked_prefill_size": None,  # override the profile's resolution of an absent flag
    "sigterm": "version",  # a graceful stop ends as api_version does (README); "exit": exit 0; "kill": SIGKILL
    "access_log": True,
    "exit_message": "RuntimeError: No CUDA GPUs are available",
    "gpu_state_dir": None,  # where servers publish per-GPU usage for bin/nvidia-smi (None: /run/sglang-standin)
    "gpus": None,  # GPUs nvidia-smi lists (None: the profile's TP size)
    "neighbour": None,  # {"pid", "gib", "gpus", "name"} or a list: other processes holding GPU memory
    "kv_admission": "queue",  # "queue": wait for KV room like sglang's scheduler; "crash": Prefill/Decode out of memory
    "oom_style": "torch",  # how a failed prefill allocation reads: torch | cuda_error | flashinfer | illegal_access
    "platform": "cuda",  # "rocm": --attention-backend resolves to aiter, and the aiter factor applies (resolution.py)
    "rust_frontend": False,  # /model_info as sglang's Rust frontend serves it (vocab_size, max_context_length, ...)
}
# Environment variables (of the server's unit, or the caller) that override the file.
ENV_OVERRIDES = {"SGLANG_STANDIN_VERSION": "api_version", "SGLANG_STANDIN_TIME_SCALE": "time_scale"}


def load_knobs(environ: dict[str, str] | None = None) -> dict[str, object]:
    env = os.environ if environ is None else environ
    path = env.get("SGLANG_STANDIN_CONFIG") or (DEFAULT_PATH if os.path.exists(DEFAULT_PATH) else None)
    knobs = dict(DEFAULTS)
    if path:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object")
        knobs.update(data)
    for var, key in ENV_OVERRIDES.items():
        if env.get(var):
            knobs[key] = float(env[var]) if key == "time_scale" else env[var]
    if env.get("SGLANG_RUST_SERVER", "").lower() in ("1", "true"):
        knobs["rust_frontend"] = True
    if knobs["failure"] not in FAILURES:
        raise ValueError(f"unknown failure mode {knobs['failure']!r}; one of {FAILURES}")
    if knobs["sigterm"] not in ("version", "exit", "kill"):
        raise ValueError(f"unknown sigterm {knobs['sigterm']!r}; 'version', 'exit' or 'kill'")
    if knobs["oom_style"] not in ("torch", "cuda_error", "flashinfer", "illegal_access"):
        raise ValueError(f"unknown oom_style {knobs['oom_style']!r}")
    if knobs["platform"] not in ("cuda", "rocm"):
        raise ValueError(f"unknown platform {knobs['platform']!r}; 'cuda' or 'rocm'")
    if knobs["kv_admission"] not in ("queue", "crash"):
        raise ValueError(f"unknown kv_admission {knobs['kv_admission']!r}; 'queue' or 'crash'")
    return knobs


def version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in str(version).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
