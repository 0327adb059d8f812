"""Memory error texts: torch's CUDA OOM (c10/cuda/CUDACachingAllocator.cpp, torch >= 2.9) and sglang's startup ones."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10


def format_size(size: int) -> str:
    """torch's c10 ``format_size``: bytes / KiB / MiB / GiB with two decimals."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= MIB:
        return f"{size / KIB:.2f} KiB"
    if size <= GIB:
        return f"{size / MIB:.2f} MiB"
    return f"{size / GIB:.2f} GiB"


@dataclass(frozen=True)
class OOM:
    """A failed allocation, with everything torch's message needs (bytes)."""

    alloc_bytes: int
    total_bytes: int
    free_bytes: int
    process_bytes: int  # this process's memory on the device (NVML), PyTorch's and not
    allocated_bytes: int  # allocated by PyTorch, private pools included
    reserved_unallocated_bytes: int
    private_pool_bytes: int = 0  # allocated in private pools (CUDA graphs)
    others: tuple[tuple[int, int], ...] = ()  # (pid, bytes) of other processes on the device
    pid: int = 0  # this process (orders the NVML process lines)


def torch_oom_message(oom: OOM, device: int = 0) -> str:
    """The exception text after ``torch.OutOfMemoryError: ``: NVML process lines, private-pool clause, new link."""
    procs = sorted([(oom.pid, -1), *oom.others])
    proc_info = ""
    for pid, used in procs:
        if used < 0:
            proc_info += (
                f"Including non-PyTorch memory, this process has {format_size(oom.process_bytes)} memory in use. "
            )
        else:
            proc_info += f"Process {pid} has {format_size(used)} memory in use. "
    private = ""
    if oom.private_pool_bytes > 0:
        private = f"with {format_size(oom.private_pool_bytes)} allocated in private pools (e.g., CUDA Graphs), "
    return (
        f"CUDA out of memory. Tried to allocate {format_size(oom.alloc_bytes)}. GPU {device} has a total "
        f"capacity of {format_size(oom.total_bytes)} of which {format_size(oom.free_bytes)} is free. "
        f"{proc_info}"
        f"Of the allocated memory {format_size(oom.allocated_bytes)} is allocated by PyTorch, {private}and "
        f"{format_size(oom.reserved_unallocated_bytes)} is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
        "See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    )


_CUDA_ERROR_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
OOM_STYLES = ("torch", "cuda_error", "flashinfer", "illegal_access")


def runtime_oom_exception(style: str, oom: OOM, device: int = 0) -> str:
    """The exception line(s) a failed prefill allocation surfaces as (knob ``oom_style``)."""
    if style == "cuda_error":  # a raw cudaMalloc outside the caching allocator (torch 2.11's wording)
        return (
            "torch.AcceleratorError: CUDA error: out of memory\n"
            "Search for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
            "group__CUDART__TYPES.html for more information.\n" + _CUDA_ERROR_TAIL
        )
    if style == "flashinfer":
        return (
            f"RuntimeError: Failed to allocate memory for batch_prefill_tmp_v with size {oom.alloc_bytes} "
            "and alignment 16 in AlignedAllocator"
        )
    if style == "illegal_access":
        return (
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
            "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
            "group__CUDART__TYPES.html for more information.\n" + _CUDA_ERROR_TAIL
        )
    return "torch.OutOfMemoryError: " + torch_oom_message(oom, device)
