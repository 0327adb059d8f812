"""PURE: vLLM's own default ``--gpu-memory-utilization`` by release, for a unit that sets none.

Read in each release's ``CacheConfig`` (vllm/config/cache.py; 0.8.5 … 0.10.x: vllm/config.py):

* up to 0.19.1: ``gpu_memory_utilization: float = 0.9`` (0.8.5 vllm/config.py, 0.11.0 vllm/config/cache.py,
  0.19.1 ``Field(default=0.9, gt=0, le=1)``);
* 0.20.0 … 0.33.0: ``Field(default=0.92, gt=0, le=1)``;
* from 0.34.0: ``None``, resolved by ``CacheConfig.resolved_gpu_memory_utilization``: 1.0 with the extensible KV
  cache (settled per model, vllm/config/vllm.py), else ``DEFAULT_GPU_MEMORY_UTILIZATION = 0.92``. The release
  alone does not say which, so 0.92 is taken: a plan that lowers "the default" by a step then never lands above
  what the server runs (``/metrics``' ``cache_config_info`` tells the mode where it is read: capacity.py).
"""

from __future__ import annotations

DEFAULT_092_FROM = (0, 20)
RESOLVED_FROM = (0, 34)
OLD_DEFAULT = 0.9
NEW_DEFAULT = 0.92


def default_utilization_at(release: tuple[int, ...] | None) -> float | None:
    """The default utilization of ``release`` (None: the release is not known)."""
    if not release:
        return None
    return OLD_DEFAULT if release < DEFAULT_092_FROM else NEW_DEFAULT
