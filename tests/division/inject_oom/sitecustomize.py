"""Loaded by every Python process that has this directory on PYTHONPATH (the ``site`` module
imports ``sitecustomize``): when ``MEMBENCH_TEST_OOM_ABOVE_BATCH`` is N, a DIVISION training step on
a batch larger than N raises an out-of-memory error, so the largest-batch search can be tested on a
CPU, one subprocess per probe. The kinds rotate with the batch size (torch's OutOfMemoryError,
cuBLAS's allocation failure, the CPU allocator's), as all must count as out of memory."""

import os

_ABOVE = os.environ.get("MEMBENCH_TEST_OOM_ABOVE_BATCH")

if _ABOVE:
    import torch

    import membench.division.bench as _bench

    _training_step = _bench.training_step

    def _failing_training_step(model, optimizer, inputs, targets, *args, **kwargs):
        batch = inputs.shape[0]
        if batch > int(_ABOVE):
            kinds = (
                torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {batch} MiB (injected)"),
                RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
                RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"),
            )
            raise kinds[batch % len(kinds)]
        return _training_step(model, optimizer, inputs, targets, *args, **kwargs)

    _bench.training_step = _failing_training_step
