"""The vLLM stand-in's knobs (JSON): ``$VLLM_STANDIN_CONFIG``, else ``$SGLANG_STANDIN_CONFIG``, else
``/etc/vllm-standin.json``, else ``/etc/sglang-standin.json`` (the sandbox host's knobs file). Stdlib only.
"""

from __future__ import annotations

import json
import os

DEFAULTS: dict[str, object] = {
    "time_scale": 0.004,  # wall seconds per simulated second
    "load_s": 45.0,  # simulated startup
    "gpu_state_dir": None,  # where the GPU board lives (bin/nvidia-smi reads it); None: /run/sglang-standin
    "neighbour": None,  # {"pid", "gib"}: another process on the GPU (read at startup and on every prefill)
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "exit_after_death_s": 0.5,  # wall seconds between the engine's death and the process exit (/health 503)
    "vllm_version": "0.11.0",  # the version whose stop and request logging it has (0.8.5 and 0.11.0 read)
    "capacity_line": True,  # False: the "GPU KV cache size" line never reaches the journal (journald's rate limit)
    "weights_gib": None,  # a model of another size (GiB of weights per GPU); None: the profile's 24.30
}
ENV_OVERRIDES = {"VLLM_STANDIN_VERSION": "vllm_version"}


def load_knobs() -> dict[str, object]:
    knobs = dict(DEFAULTS)
    for path in (
        os.environ.get("VLLM_STANDIN_CONFIG"),
        os.environ.get("SGLANG_STANDIN_CONFIG"),
        "/etc/vllm-standin.json",
        "/etc/sglang-standin.json",
    ):
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                knobs.update(json.load(fh))
            break
    for env, key in ENV_OVERRIDES.items():
        if os.environ.get(env):
            knobs[key] = os.environ[env]
    return knobs


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in str(version).split(".")[:3] if p.isdigit())
