"""The C library's allocator in a timed CPU job: freed memory kept for reuse.

glibc's malloc hands large freed blocks back to the kernel (``munmap``, or trimming the heap's top)
and faults them in again, a zero-filled page at a time, when the next map of the same size is
allocated. A training step that allocates maps in backward (a compressing method's decompressed
inputs) then pays page faults that a caching allocator does not: CUDA's keeps freed blocks, and
PyTorch's CPU performance tuning guide recommends allocators that reuse memory (jemalloc,
TCMalloc). A timed CPU job calls :func:`keep_freed_memory` first, so that every method, vanilla
included, is timed on reused memory (docs/benchmarks/division.md measures the difference).
"""

from __future__ import annotations

import ctypes

__all__ = ["keep_freed_memory"]

# mallopt's parameters (glibc's <malloc.h>).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# The largest mmap threshold glibc accepts on 64-bit machines (HEAP_MAX_SIZE / 2): blocks below it
# come from the heap, larger ones are mapped and unmapped as before.
_MMAP_THRESHOLD_BYTES = 32 * 2**20
# The heap's free top is handed back only beyond this (mallopt takes an int).
_TRIM_THRESHOLD_BYTES = 2**31 - 1


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed blocks of up to 32 MiB in the process for reuse (fixed mmap
    and trim thresholds in place of its adaptive ones). Sets process state: for a command's entry
    point, not for library code.

    Returns True when the policy is in force; False where the C library is not glibc (nothing is
    changed there).
    """
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version"):
        return False
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
    )
