"""Out of memory is recognised whatever raised it; other errors are not results."""

import pytest
import torch

from membench.core.oom import is_out_of_memory, oom_fields


@pytest.mark.parametrize(
    "exc",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        RuntimeError("pack_2bit: cudaMalloc failed: cudaErrorMemoryAllocation"),
        RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 1 bytes."
        ),
        MemoryError(),
    ],
    ids=["torch", "cublas", "cudnn", "extension", "cuda-runtime", "cpu-allocator", "python"],
)
def test_every_kind_of_out_of_memory_is_a_result(exc):
    assert is_out_of_memory(exc)
    fields = oom_fields(exc)
    assert fields["status"] == "oom"
    assert fields["status_message"]
    assert "\n" not in fields["status_message"]


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 16x4)"),
        ValueError("out of memory"),  # not an error torch or a library raises for memory
    ],
)
def test_other_errors_are_not_out_of_memory(exc):
    assert not is_out_of_memory(exc)


def test_the_message_is_the_first_line():
    exc = RuntimeError(
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\nmore detail"
    )
    assert (
        oom_fields(exc)["status_message"]
        == "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    )
