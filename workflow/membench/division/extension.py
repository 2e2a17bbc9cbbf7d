"""Build and load the C++/CUDA kernels of the compressors (``csrc/``).

The build machinery (the per-user cache, manifest, loading, version checks) is
:mod:`membench.core.extension`; this module names DIVISION's sources and flags. The pure-torch
functions in :mod:`membench.division.compress` are the fallback and the reference the kernels are
tested against. It imports neither torch nor the kernels, so the workflow's rules read
:data:`SPEC`'s sources from it.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from membench.core import extension
from membench.core.extension import (
    CUDA_CHOICES,
    DEFAULT_LOCK_TIMEOUT_S,
    KERNEL_CHOICES,
    LOCK_NAME,
    MANIFEST_NAME,
    build_lock,
    cuda_build_possible,
    cxx_compiler_present,
)

__all__ = [
    "CSRC_DIR",
    "CUDA_CHOICES",
    "DEFAULT_LOCK_TIMEOUT_S",
    "KERNEL_CHOICES",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "SPEC",
    "build_extension",
    "build_lock",
    "cuda_build_possible",
    "cxx_compiler_present",
    "load_extension",
]

CSRC_DIR = Path(__file__).parent / "csrc"
# Contraction into FMAs would round differently from the reference's separate multiply and add.
SPEC = extension.ExtensionSpec(
    name="membench_division_ops",
    source_dir=CSRC_DIR,
    cpu_sources=(
        "division_ops.cpp",
        "division_cpu_baseline.cpp",
        "division_cpu_avx2.cpp",
        "division_cpu_avx512.cpp",
    ),
    cuda_sources=("division_cuda.cu",),
    # What the library exports, recorded in its manifest; every implementation provides these
    # (membench.division.kernels.KERNEL_NAMES).
    kernels=(
        "division_compress",
        "division_decompress",
        "group_compress",
        "group_decompress",
        "relu_pack",
        "dropout_pack",
        "masked_grad",
        "maxpool2d_forward",
        "maxpool2d_backward",
    ),
    build_command="membench division build",
    # at::parallel_for splits work over threads only where the code is compiled with OpenMP.
    cflags=("-O3", "-ffp-contract=off", "-fopenmp"),
    ldflags=("-fopenmp",),
    cuda_cflags=("-O3", "--fmad=false"),
)


def build_extension(
    cache_dir: str | os.PathLike,
    cuda: str = "auto",
    verbose: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    outdir: str | os.PathLike | None = None,
) -> dict:
    """Find or compile the kernels in ``cache_dir`` (and with ``outdir`` write
    ``outdir/manifest.json`` pointing at them); return the manifest (see
    :func:`membench.core.extension.build_extension`)."""
    return extension.build_extension(SPEC, cache_dir, cuda, verbose, lock_timeout_s, outdir)


def load_extension(manifest_path: str | os.PathLike) -> ModuleType:
    """Import the built kernels named by a build manifest (see
    :func:`membench.core.extension.load_extension`)."""
    return extension.load_extension(manifest_path, SPEC)
