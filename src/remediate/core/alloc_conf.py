"""PURE: a PyTorch allocator value (``PYTORCH_CUDA_ALLOC_CONF``, ``PYTORCH_ALLOC_CONF``) read as torch reads it:
the options in effect. Where a unit sets it, and merging into it: core/unitfile/alloc.py."""

from __future__ import annotations

ALLOC = "PYTORCH_CUDA_ALLOC_CONF"
ALLOC_NEW = "PYTORCH_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"


def missing_options(value: str | None, wanted: str) -> list[str]:
    """The wanted ``key:value`` options that ``value`` does not put in effect (the last of a key wins, as in
    c10/cuda/CUDAAllocatorConfig.cpp's parser)."""
    have: dict[str, str] = {}
    for part in (value or "").split(","):
        key, colon, setting = part.partition(":")
        if colon:
            have[key.strip()] = setting.strip()
    return [o for o in wanted.split(",") if have.get(o.partition(":")[0]) != o.partition(":")[2]]


def has_expandable(value: str | None) -> bool:
    """Whether an allocator value turns expandable segments on. torch parses the list left to right and a later
    key overrides an earlier one (c10/cuda/CUDAAllocatorConfig.cpp ``parseArgs``), so the last
    ``expandable_segments`` wins: ``expandable_segments:True,expandable_segments:False`` is off."""
    return not missing_options(value, EXPANDABLE)
