"""Out of memory is a measured result, whatever raised it.

PyTorch raises :class:`torch.OutOfMemoryError` when its caching allocator fails, but a device can
also run out inside a library or an extension: cuBLAS and cuDNN report ``CUBLAS_STATUS_ALLOC_FAILED``
and ``CUDNN_STATUS_ALLOC_FAILED`` as plain ``RuntimeError``, an extension's failed ``cudaMalloc``
``cudaErrorMemoryAllocation`` ("CUDA error: out of memory"), the CPU allocator "can't allocate
memory". :func:`is_out_of_memory` recognises them all, so a memory benchmark records ``status``
``oom`` with the message instead of crashing.
"""

from __future__ import annotations

import torch

__all__ = ["is_out_of_memory", "oom_fields", "OOM_STATUS"]

OOM_STATUS = "oom"
_MESSAGE_MARKERS = (
    "CUDA error: out of memory",
    "cudaErrorMemoryAllocation",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUSOLVER_STATUS_ALLOC_FAILED",
    "CUSPARSE_STATUS_ALLOC_FAILED",
    "CUFFT_ALLOC_FAILED",
    "DefaultCPUAllocator: can't allocate memory",
)
_MESSAGE_CHARS = 500


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says a device (or the host allocator) ran out of memory."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    message = str(exc)
    return any(marker in message for marker in _MESSAGE_MARKERS)


def oom_fields(exc: BaseException) -> dict[str, str]:
    """The record fields of an out-of-memory result: ``status`` and ``status_message`` (the first
    line of the error, at most 500 characters)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    message = lines[0] if lines else type(exc).__name__
    return {"status": OOM_STATUS, "status_message": message[:_MESSAGE_CHARS]}
